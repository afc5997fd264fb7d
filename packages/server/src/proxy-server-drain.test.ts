/**
 * The proxy-server's drain (issue 43): on SIGTERM (drain()) it reports not ready, sends GOAWAY on
 * every HTTP/2 session (clients' and agents'), refuses new dials as draining, lets the dials pending
 * and the tunnels open finish up to --graceful-shutdown-timeout, then closes. And readiness before
 * agents: ready once an agent is connected, or after --ready-after-agents-timeout; and the
 * warm-up after it (--warm-up-dial-wait): a dial for a cluster whose agent is not here yet waits.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as http from "node:http";
import type * as http2 from "node:http2";
import type * as net from "node:net";
import * as tls from "node:tls";
import { once } from "node:events";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { DialErrors, PacketType, type Packet } from "@cluster-proxy/protocol";
import { connectSession, openCall } from "@cluster-proxy/tunnel";
import { PROXY_METHOD } from "@cluster-proxy/protocol";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { ProxyServer } from "./proxy-server.js";
import { testServerOptions } from "./testing/server-options.js";
import { connectFakeAgent, connectFakeClient, type FakePeer } from "./testing/fake-peers.js";
import { errorMessage } from "@cluster-proxy/errors";
import { tcpPort, waitUntil } from "@cluster-proxy/tunnel/testing";

function readyz(s: ProxyServer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: "127.0.0.1", port: tcpPort(s.addresses().health), path: "/readyz" }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject);
  });
}

function expectType<T extends Packet["type"]>(p: Packet, type: T): Extract<Packet, { type: T }> {
  assert.equal(p.type, type, `expected packet type ${type}, got ${p.type}`);
  return p as Extract<Packet, { type: T }>;
}

/** Resolves when `session` has received a GOAWAY (rejects after 10 s). */
function goawayOf(session: http2.Http2Session): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no GOAWAY within 10 s")), 10_000);
    session.once("goaway", (code: number) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

/** Whether `p` settles within `ms` (real time). */
async function settlesWithin<T>(p: Promise<T>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const later = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const settled = p.then(
    () => true as const,
    () => true as const,
  );
  const result = await Promise.race([settled, later]);
  clearTimeout(timer);
  return result;
}

describe("proxy-server drain and readiness", () => {
  let pki: TestPki;
  const peers: FakePeer[] = [];
  const servers: ProxyServer[] = [];

  before(async () => {
    pki = await createTestPki();
  });

  after(async () => {
    for (const p of peers) p.close();
    await Promise.all(servers.map((s) => s.close()));
    pki.cleanup();
  });

  async function startServer(
    overrides: Parameters<typeof testServerOptions>[1],
    clock?: ManualClock,
  ): Promise<ProxyServer> {
    const s = new ProxyServer(testServerOptions(pki, overrides), clock ? { clock } : {});
    servers.push(s);
    await s.start();
    return s;
  }
  async function agentOf(s: ProxyServer, cluster: string): Promise<FakePeer> {
    const tlsOptions = { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey };
    const a = await connectFakeAgent(
      { host: "127.0.0.1", port: tcpPort(s.addresses().agent), tls: tlsOptions },
      { agentid: `agent-${cluster}`, agentidentifiers: `host=${cluster}` },
    );
    peers.push(a);
    await a.call.waitForHeaders();
    return a;
  }
  async function clientOf(s: ProxyServer): Promise<FakePeer> {
    const c = await connectFakeClient({
      host: "127.0.0.1",
      port: tcpPort(s.addresses().server),
      tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
    });
    peers.push(c);
    return c;
  }
  async function connectDoor(s: ProxyServer): Promise<tls.TLSSocket> {
    const sock = tls.connect({
      host: "127.0.0.1",
      port: tcpPort(s.addresses().httpConnect),
      ca: pki.ca,
      cert: pki.clientCert,
      key: pki.clientKey,
      servername: "localhost",
    });
    sock.on("error", () => undefined);
    await once(sock, "secureConnect");
    return sock;
  }
  async function answerOf(sock: net.Socket): Promise<string> {
    let all = "";
    sock.setEncoding("latin1");
    sock.on("data", (c: string) => (all += c));
    await once(sock, "close");
    return all;
  }

  test("ready once an agent is connected, or after --ready-after-agents-timeout without one; never while draining", async () => {
    const clock = new ManualClock();
    const s = await startServer({ readyAfterAgentsTimeout: 10_000 }, clock);
    assert.deepEqual(await readyz(s), { status: 500, body: "no connection to any proxy agent" });
    clock.advance(9_999);
    assert.equal((await readyz(s)).status, 500, "not before the timeout");
    clock.advance(1);
    assert.deepEqual(await readyz(s), { status: 200, body: "ok" }, "a hub without clusters gets ready");

    // 0: only an agent makes it ready (the Go server's rule).
    const goClock = new ManualClock();
    const go = await startServer({ readyAfterAgentsTimeout: 0 }, goClock);
    goClock.advance(24 * 3600_000);
    assert.equal((await readyz(go)).status, 500);
    const a = await agentOf(go, "east");
    assert.deepEqual(await readyz(go), { status: 200, body: "ok" }, "ready with an agent, before any timeout");

    void go.drain();
    assert.deepEqual(await readyz(go), { status: 500, body: "proxy server is draining" });
    a.close();
  });

  test("--shutdown-delay: not ready at once, but new sessions and dials are served until the delay is over; then the drain", async () => {
    const s = await startServer({ shutdownDelay: 1_500, gracefulShutdownTimeout: 5_000, readyAfterAgentsTimeout: 0 });
    const agent = await agentOf(s, "east");
    let goneAway = false;
    agent.session.once("goaway", () => (goneAway = true));
    const draining = s.drain();
    assert.deepEqual(await readyz(s), { status: 500, body: "proxy server is draining" });
    // A client the Service still sends here: its session and its dial are served.
    const late = await clientOf(s);
    late.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:1", random: 1n } });
    expectType(await agent.packets.next(), PacketType.DIAL_REQ);
    agent.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 1n, connectID: 7n, error: "" } });
    const answered = expectType(await late.packets.next(), PacketType.DIAL_RSP);
    assert.equal(answered.dialResponse.error, "");
    assert.equal(goneAway, false, "no GOAWAY during the delay");
    // After the delay: GOAWAY, and a new dial is refused as draining.
    await goawayOf(agent.session);
    const after = await clientOf(s);
    after.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:2", random: 2n } });
    const refused = await after.packets.next().catch(() => undefined);
    if (refused) assert.equal(expectType(refused, PacketType.DIAL_RSP).dialResponse.error, DialErrors.serverDraining);
    late.packets.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: 7n } });
    agent.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: 7n, error: "" } });
    await draining;
  });

  test("drain: GOAWAY to clients and agents, new dials refused as draining, pending and open tunnels finish, then drained", async () => {
    const s = await startServer({ gracefulShutdownTimeout: 60_000, readyAfterAgentsTimeout: 0 });
    const agent = await agentOf(s, "east");
    // An open tunnel...
    const open = await clientOf(s);
    open.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:1", random: 1n } });
    expectType(await agent.packets.next(), PacketType.DIAL_REQ);
    agent.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 1n, connectID: 11n, error: "" } });
    expectType(await open.packets.next(), PacketType.DIAL_RSP);
    // ...a dial the agent has not answered yet...
    const pending = await clientOf(s);
    pending.packets.send({
      type: PacketType.DIAL_REQ,
      dialRequest: { protocol: "tcp", address: "east:2", random: 2n },
    });
    expectType(await agent.packets.next(), PacketType.DIAL_REQ);
    // ...and a stream opened (its session too) that has not dialled yet.
    const late = await clientOf(s);
    // A PING's answer comes after the server read the stream's HEADERS (the GOAWAY then names it).
    await new Promise<void>((resolve, reject) => late.session.ping((err) => (err ? reject(err) : resolve())));

    const agentGoaway = goawayOf(agent.session);
    const clientGoaway = goawayOf(open.session);
    let drained: boolean | undefined;
    const draining = s.drain().then((idle) => (drained = idle));

    assert.equal(await agentGoaway, 0, "the agent's session gets GOAWAY NO_ERROR");
    assert.equal(await clientGoaway, 0, "a client's session gets GOAWAY NO_ERROR");
    assert.deepEqual(await readyz(s), { status: 500, body: "proxy server is draining" });

    // A dial on a stream opened before the GOAWAY: refused in words, never sent to the agent.
    late.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:3", random: 3n } });
    const refused = expectType(await late.packets.next(), PacketType.DIAL_RSP);
    assert.equal(refused.dialResponse.error, DialErrors.serverDraining);
    assert.equal(refused.dialResponse.connectID, 0n);

    // A new connection to the gRPC door: GOAWAY before its first stream, which is refused.
    const fresh = await connectSession({
      host: "127.0.0.1",
      port: tcpPort(s.addresses().server),
      tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
    });
    try {
      const call = openCall(fresh, PROXY_METHOD);
      const status = await new Promise<{ code: number; details: string }>((resolve) => call.once("close", resolve));
      assert.notEqual(status.code, 0, "the stream of a session opened while draining is refused");
    } catch (err) {
      assert.match(errorMessage(err), /GOAWAY|closed|destroyed/i, "or the session is already going away");
    } finally {
      fresh.destroy();
    }

    // The CONNECT door: 503 with the draining text.
    const door = await connectDoor(s);
    const answer = answerOf(door);
    door.write("CONNECT east:4 HTTP/1.1\r\nHost: east:4\r\n\r\n");
    const text = await answer;
    assert.match(text, /^HTTP\/1\.1 503 Service Unavailable\r\n/);
    assert.ok(text.includes(DialErrors.serverDraining), text);

    // The pending dial is answered as usual, and the open tunnel carries data both ways.
    agent.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 2n, connectID: 12n, error: "" } });
    assert.equal(expectType(await pending.packets.next(), PacketType.DIAL_RSP).dialResponse.connectID, 12n);
    open.packets.send({ type: PacketType.DATA, data: { connectID: 11n, data: Buffer.from("ping"), error: "" } });
    const toAgent = expectType(await agent.packets.next(), PacketType.DATA);
    assert.equal(Buffer.from(toAgent.data.data).toString(), "ping");
    agent.packets.send({ type: PacketType.DATA, data: { connectID: 11n, data: Buffer.from("pong"), error: "" } });
    const toClient = expectType(await open.packets.next(), PacketType.DATA);
    assert.equal(Buffer.from(toClient.data.data).toString(), "pong");

    assert.equal(await settlesWithin(draining, 200), false, "drain waits while tunnels are open");
    // The endpoint closes both connections: the drain is over.
    for (const connectID of [11n, 12n]) {
      agent.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: "" } });
    }
    expectType(await open.packets.next(), PacketType.CLOSE_RSP);
    expectType(await pending.packets.next(), PacketType.CLOSE_RSP);
    await draining;
    assert.equal(drained, true, "drained: no tunnel left before the timeout");
    // The refused dial and the refused CONNECT.
    assert.match(await s.metrics.registry.metrics(), /dial_failure_count\{reason="draining"\} 2/);
    await s.close();
  });

  test("a drain whose tunnels outlive --graceful-shutdown-timeout resolves false; close() then cuts them", async () => {
    const clock = new ManualClock();
    const s = await startServer({ gracefulShutdownTimeout: 5_000, readyAfterAgentsTimeout: 0 }, clock);
    const agent = await agentOf(s, "east");
    const c = await clientOf(s);
    c.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:1", random: 1n } });
    expectType(await agent.packets.next(), PacketType.DIAL_REQ);
    agent.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 1n, connectID: 1n, error: "" } });
    expectType(await c.packets.next(), PacketType.DIAL_RSP);

    const draining = s.drain();
    assert.equal(await settlesWithin(draining, 100), false);
    clock.advance(4_999);
    assert.equal(await settlesWithin(draining, 100), false, "not before the timeout");
    clock.advance(1);
    assert.equal(await draining, false, "the timeout ended the drain with a tunnel open");
    await s.close();
    await c.packets.closed(10_000);
  });

  test("close() during a drain (the second signal) does not wait for the drain timeout", async () => {
    const s = await startServer({ gracefulShutdownTimeout: 3_600_000, readyAfterAgentsTimeout: 0 });
    const agent = await agentOf(s, "east");
    const c = await clientOf(s);
    c.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:1", random: 1n } });
    expectType(await agent.packets.next(), PacketType.DIAL_REQ);
    agent.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 1n, connectID: 1n, error: "" } });
    expectType(await c.packets.next(), PacketType.DIAL_RSP);
    const draining = s.drain();
    assert.equal(await settlesWithin(s.close(), 10_000), true, "close() finished within 10 s");
    assert.equal(await draining, false);
  });

  /** Dials the server holds while they wait for an agent (its gauge). */
  async function waitingDials(s: ProxyServer): Promise<number> {
    const gauge = s.metrics.registry.getSingleMetric("cluster_proxy_server_dials_waiting_for_agent");
    return (await gauge!.get()).values[0]?.value ?? 0;
  }
  /** The first bytes `sock` reads (latin1). */
  function firstData(sock: net.Socket): Promise<string> {
    return new Promise((resolve, reject) => {
      sock.once("data", (c: Buffer) => resolve(c.toString("latin1")));
      sock.once("close", () => reject(new Error("closed before any answer")));
    });
  }
  const dialReq = (address: string, random: bigint): Packet => ({
    type: PacketType.DIAL_REQ,
    dialRequest: { protocol: "tcp", address, random },
  });

  test("--warm-up-dial-wait: just ready, a dial on either door for a cluster whose agent is not here yet waits for it; after the warm-up it fails at once", async () => {
    const clock = new ManualClock();
    const s = await startServer({ readyAfterAgentsTimeout: 1_000, warmUpDialWait: 20_000 }, clock);
    clock.advance(1_000);
    assert.equal((await readyz(s)).status, 200, "ready without an agent: the Service sends clients");
    const c = await clientOf(s);
    c.packets.send(dialReq("east:1", 1n));
    const door = await connectDoor(s);
    const doorAnswer = firstData(door);
    door.write("CONNECT east:2 HTTP/1.1\r\nHost: east:2\r\n\r\n");
    await waitUntil("both dials wait", async () => (await waitingDials(s)) === 2);
    clock.advance(9_000);
    const agent = await agentOf(s, "east");
    const reqs = [
      expectType(await agent.packets.next(), PacketType.DIAL_REQ),
      expectType(await agent.packets.next(), PacketType.DIAL_REQ),
    ];
    assert.deepEqual(reqs.map((r) => r.dialRequest.address).sort(), ["east:1", "east:2"]);
    for (const [i, r] of reqs.entries())
      agent.packets.send({
        type: PacketType.DIAL_RSP,
        dialResponse: { random: r.dialRequest.random, connectID: BigInt(i + 1), error: "" },
      });
    const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
    assert.equal(rsp.dialResponse.error, "");
    assert.match(await doorAnswer, /^HTTP\/1\.1 200 /);
    assert.equal(await waitingDials(s), 0);

    // The warm-up is over 20 s after the server got ready (at 1 s): a dial for a cluster without
    // an agent fails at once again, with the usual error, on both doors.
    clock.advance(11_000);
    c.packets.send(dialReq("west:1", 3n));
    assert.equal(expectType(await c.packets.next(), PacketType.DIAL_RSP).dialResponse.error, DialErrors.noAgent);
    const late = await connectDoor(s);
    const lateAnswer = answerOf(late);
    late.write("CONNECT west:1 HTTP/1.1\r\nHost: west:1\r\n\r\n");
    assert.match(await lateAnswer, /^HTTP\/1\.1 500 [^]*No agent available/);
    assert.equal(await waitingDials(s), 0);
    door.destroy();
  });

  test("--warm-up-dial-wait: a waiting dial fails with No agent available when its wait is over; drain releases the waiting dials at once, as draining", async () => {
    const clock = new ManualClock();
    const s = await startServer(
      { readyAfterAgentsTimeout: 0, warmUpDialWait: 5_000, gracefulShutdownTimeout: 60_000 },
      clock,
    );
    const c = await clientOf(s);
    c.packets.send(dialReq("north:1", 1n));
    await waitUntil("the dial waits", async () => (await waitingDials(s)) === 1);
    clock.advance(4_999);
    assert.equal(await waitingDials(s), 1);
    clock.advance(1);
    assert.equal(expectType(await c.packets.next(), PacketType.DIAL_RSP).dialResponse.error, DialErrors.noAgent);

    // (Still before any agent: the warm-up has not begun to run out.)
    c.packets.send(dialReq("north:2", 2n));
    const door = await connectDoor(s);
    const doorAnswer = answerOf(door);
    door.write("CONNECT south:1 HTTP/1.1\r\nHost: south:1\r\n\r\n");
    await waitUntil("both dials wait", async () => (await waitingDials(s)) === 2);
    const drained = s.drain();
    assert.equal(expectType(await c.packets.next(), PacketType.DIAL_RSP).dialResponse.error, DialErrors.serverDraining);
    const text = await doorAnswer;
    assert.match(text, /^HTTP\/1\.1 503 Service Unavailable\r\n/);
    assert.ok(text.includes(DialErrors.serverDraining), text);
    assert.equal(await drained, true, "nothing left to drain");
    await s.close();
  });

  test("--warm-up-dial-wait: a client that goes away while its dial waits (gRPC stream, CONNECT socket) frees it at once", async () => {
    const clock = new ManualClock();
    const s = await startServer({ readyAfterAgentsTimeout: 0, warmUpDialWait: 20_000 }, clock);
    const c = await clientOf(s);
    c.packets.send(dialReq("north:1", 1n));
    const door = await connectDoor(s);
    door.write("CONNECT north:2 HTTP/1.1\r\nHost: north:2\r\n\r\n");
    await waitUntil("both dials wait", async () => (await waitingDials(s)) === 2);
    c.close();
    door.end();
    await waitUntil("no dial waits", async () => (await waitingDials(s)) === 0);
    assert.match(await s.metrics.registry.metrics(), /dials_waited_for_agent_total\{result="cancelled"\} 2/);
  });
});
