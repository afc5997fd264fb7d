/**
 * A proxy-server draining in the middle of a client's dials (issue 43), on loopback: two real
 * proxy-servers behind one address (a forwarder playing the hub's Service), one agent on each.
 * Server A drains while a dial is on its way to it: the SDK's dial, refused unprocessed by A's
 * GOAWAY, goes out again on a new connection and lands on B; the tunnel already open on A keeps
 * working until it ends, and then A's drain is over.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import { once } from "node:events";
import { PacketType } from "@cluster-proxy/protocol";
import { TunnelClient, type TunnelSocket } from "@cluster-proxy/client";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { ProxyServer } from "../../packages/server/src/proxy-server.js";
import { testServerOptions } from "../../packages/server/src/testing/server-options.js";
import { connectFakeAgent, type FakePeer } from "../../packages/server/src/testing/fake-peers.js";
import { tcpPort } from "@cluster-proxy/tunnel/testing";

/** An agent that accepts every dial and echoes every DATA; counts the dials it got. */
function echoAgent(agent: FakePeer): { dials: string[] } {
  const seen = { dials: [] as string[] };
  let nextID = 1n;
  agent.call.on("message", () => undefined);
  void (async () => {
    for (;;) {
      let p;
      try {
        p = await agent.packets.next(3_600_000);
      } catch {
        return;
      }
      if ("dialRequest" in p) {
        seen.dials.push(p.dialRequest.address);
        const connectID = nextID++;
        agent.packets.send({
          type: PacketType.DIAL_RSP,
          dialResponse: { random: p.dialRequest.random, connectID, error: "" },
        });
      } else if ("data" in p) {
        agent.packets.send({
          type: PacketType.DATA,
          data: { connectID: p.data.connectID, data: p.data.data, error: "" },
        });
      } else if ("closeRequest" in p) {
        const connectID = p.closeRequest.connectID;
        agent.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: "" } });
      }
    }
  })();
  return seen;
}

/**
 * The hub's Service: new connections go to `target`; while `held`, bytes from clients to
 * `heldTarget` wait in the forwarder (a dial on its way) until release().
 */
class Forwarder {
  target = 0;
  private heldTarget = -1;
  private readonly waiting: { to: net.Socket; chunk: Buffer }[] = [];
  private readonly sockets = new Set<net.Socket>();
  private onHeld: (() => void) | undefined;
  readonly server = net.createServer((client) => {
    const to = this.target;
    const upstream = net.connect(to, "127.0.0.1");
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on("error", () => undefined);
      s.once("close", () => {
        this.sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on("data", (chunk: Buffer) => {
      if (to === this.heldTarget) {
        this.waiting.push({ to: upstream, chunk });
        this.onHeld?.();
      } else upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => client.write(chunk));
  });

  /** Hold client bytes to `target` from now on; resolves once some are held. */
  hold(target: number): Promise<void> {
    this.heldTarget = target;
    return new Promise((resolve) => (this.onHeld = resolve));
  }

  release(): void {
    this.heldTarget = -1;
    for (const { to, chunk } of this.waiting.splice(0)) to.write(chunk);
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

/** Write `text` and resolve with what came back (as many bytes). */
async function echo(socket: TunnelSocket, text: string): Promise<string> {
  let got = "";
  const done = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`echo timed out with ${JSON.stringify(got)}`)), 10_000);
    const onData = (c: Buffer): void => {
      got += c.toString();
      if (got.length >= text.length) {
        clearTimeout(timer);
        socket.off("data", onData);
        resolve(got);
      }
    };
    socket.on("data", onData);
  });
  socket.write(text);
  return done;
}

describe("a proxy-server draining in the middle of the SDK's dials", { timeout: 120_000 }, () => {
  let pki: TestPki;
  let a: ProxyServer;
  let b: ProxyServer;
  const agents: FakePeer[] = [];
  const forwarder = new Forwarder();
  let client: TunnelClient;

  before(async () => {
    pki = await createTestPki();
    a = new ProxyServer(testServerOptions(pki, { serverId: "a", gracefulShutdownTimeout: 60_000 }));
    b = new ProxyServer(testServerOptions(pki, { serverId: "b" }));
    await a.start();
    await b.start();
    for (const s of [a, b]) {
      const agent = await connectFakeAgent(
        {
          host: "127.0.0.1",
          port: tcpPort(s.addresses().agent),
          tls: { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey },
        },
        { agentid: "agent-east", agentidentifiers: "host=east" },
      );
      await agent.call.waitForHeaders();
      agents.push(agent);
    }
    forwarder.server.listen(0, "127.0.0.1");
    await once(forwarder.server, "listening");
    client = new TunnelClient({
      proxy: {
        host: "localhost",
        port: tcpPort(forwarder.server.address()),
        ca: pki.ca,
        cert: pki.clientCert,
        key: pki.clientKey,
      },
    });
  });

  after(async () => {
    await client.close();
    for (const agent of agents) agent.close();
    forwarder.close();
    await Promise.all([a.close(), b.close()]);
    pki.cleanup();
  });

  test("the dial refused by the draining server lands on the other; the open tunnel finishes; the drain ends", async () => {
    const onA = echoAgent(agents[0]!);
    const onB = echoAgent(agents[1]!);
    forwarder.target = tcpPort(a.addresses().server);
    const open = await client.dial("east:1");
    assert.equal(await echo(open, "before the drain"), "before the drain");

    // From now on the Service sends new connections to B, and A's next bytes wait in the forwarder.
    forwarder.target = tcpPort(b.addresses().server);
    const held = forwarder.hold(tcpPort(a.addresses().server));
    const dialling = client.dial("east:2");
    await held;
    let drainedIdle: boolean | undefined;
    const draining = a.drain().then((idle) => (drainedIdle = idle));

    const moved = await dialling;
    assert.equal(await echo(moved, "on the other replica"), "on the other replica");
    assert.deepEqual(onB.dials, ["east:2"], "the retry reached B's agent");
    forwarder.release();

    // The tunnel on A still works while A drains; A never dialled the refused one.
    assert.equal(await echo(open, "while draining"), "while draining");
    assert.deepEqual(onA.dials, ["east:1"]);
    assert.equal(a.ready(), false);
    assert.equal(drainedIdle, undefined, "A waits for its open tunnel");
    open.end();
    await once(open, "close");
    await draining;
    assert.equal(drainedIdle, true, "A drained before its timeout");
    moved.destroy();
  });
});
