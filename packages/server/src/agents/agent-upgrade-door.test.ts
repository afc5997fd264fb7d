import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { AGENT_UPGRADE_PROTOCOL } from "@cluster-proxy/api";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { freePort, waitUntil } from "@cluster-proxy/tunnel/testing";
import { ProxyServer } from "../proxy-server.js";
import { testServerOptions } from "../testing/server-options.js";
import { connectFakeAgent, type FakePeer } from "../testing/fake-peers.js";

/** Everything the peer sends until it closes (or `timeoutMs`, then rejects). */
function readAll(socket: net.Socket, timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(() => reject(new Error(`still open after ${timeoutMs} ms; got ${text}`)), timeoutMs);
    socket.setEncoding("latin1");
    socket.on("data", (c: string) => (text += c));
    socket.on("error", () => undefined);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

/** Read until the end of a response head; resolves with the head and any bytes after it. */
function readHead(socket: net.Socket, timeoutMs = 10_000): Promise<{ head: string; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let all = Buffer.alloc(0);
    const timer = setTimeout(() => reject(new Error(`no response head within ${timeoutMs} ms`)), timeoutMs);
    const onData = (c: Buffer): void => {
      all = Buffer.concat([all, c]);
      const end = all.indexOf("\r\n\r\n");
      if (end < 0) return;
      clearTimeout(timer);
      socket.off("data", onData);
      socket.pause();
      resolve({ head: all.subarray(0, end).toString("latin1"), rest: all.subarray(end + 4) });
    };
    socket.on("data", onData);
  });
}

function upgradeRequest(token = AGENT_UPGRADE_PROTOCOL, method = "GET"): string {
  return (
    `${method} /api/v1/namespaces/ns/pods/p:8096/proxy/ HTTP/1.1\r\nHost: 10.0.0.1:8096\r\n` +
    `Connection: Upgrade\r\nUpgrade: ${token}\r\nX-Forwarded-For: 10.0.0.9\r\n\r\n`
  );
}

/**
 * A byte pipe with the close semantics of the kube-apiserver's upgrade proxy (upgradeaware.go):
 * as soon as one direction ends, both connections are closed.
 */
function upgradeProxy(doorPort: number): net.Server {
  return net.createServer((agentSide) => {
    const doorSide = net.connect(doorPort, "127.0.0.1");
    const closeBoth = (): void => {
      agentSide.destroy();
      doorSide.destroy();
    };
    for (const s of [agentSide, doorSide]) {
      s.on("error", closeBoth);
      s.on("end", closeBoth);
      s.on("close", closeBoth);
    }
    agentSide.pipe(doorSide);
    doorSide.pipe(agentSide);
  });
}

describe("agent upgrade door (--agent-upgrade-port)", () => {
  let pki: TestPki;
  let server: ProxyServer;
  let doorPort: number;
  const peers: FakePeer[] = [];
  const sockets: net.Socket[] = [];

  const connect = async (): Promise<net.Socket> => {
    const socket = net.connect(doorPort, "127.0.0.1");
    sockets.push(socket);
    await once(socket, "connect");
    return socket;
  };

  /** An agent whose tunnel comes through the door: upgrade, then mTLS + HTTP/2 over the socket. */
  const agentThroughDoor = async (id: string): Promise<FakePeer> => {
    const socket = await connect();
    socket.write(upgradeRequest());
    const { head, rest } = await readHead(socket);
    assert.match(head, /^HTTP\/1\.1 101 /);
    assert.match(head, new RegExp(`\r\nUpgrade: ${AGENT_UPGRADE_PROTOCOL}`, "i"));
    assert.equal(rest.length, 0, "nothing after the 101 before the agent speaks TLS");
    const peer = await connectFakeAgent(
      { host: "127.0.0.1", port: doorPort, socket, tls: { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey } },
      { agentid: id, agentidentifiers: `host=${id}` },
    );
    peers.push(peer);
    const headers = await peer.call.waitForHeaders();
    assert.equal(headers["serverid"], "server-under-test", JSON.stringify(headers));
    return peer;
  };

  before(async () => {
    pki = await createTestPki();
    doorPort = await freePort();
    server = new ProxyServer(testServerOptions(pki, { agentUpgradePort: doorPort, agentUpgradeHeaderTimeout: 1_000 }));
    await server.start();
  });
  after(async () => {
    for (const p of peers) p.close();
    for (const s of sockets) s.destroy();
    await server?.close();
  });

  test("an agent that upgrades gets the agent port's mTLS tunnel over the same socket", async () => {
    assert.equal(server.addresses().agentUpgrade?.port, doorPort);
    await agentThroughDoor("east");
    await waitUntil("the agent registered", () => server.backendCount() === 1);
  });

  test("a request without the upgrade is answered 426 and closed; the agent port never sees it", async () => {
    const socket = await connect();
    socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    const text = await readAll(socket);
    assert.match(text, /^HTTP\/1\.1 426 /);
    assert.match(text, new RegExp(`Upgrade: ${AGENT_UPGRADE_PROTOCOL}`, "i"));
  });

  test("another upgrade token, or a method other than GET, is refused with 400", async () => {
    for (const request of [upgradeRequest("websocket"), upgradeRequest(AGENT_UPGRADE_PROTOCOL, "POST")]) {
      const socket = await connect();
      socket.write(request);
      const text = await readAll(socket);
      assert.match(text, /^HTTP\/1\.1 400 /, request);
    }
  });

  test("bytes that are not HTTP are refused with 400", async () => {
    const socket = await connect();
    socket.write("\x16\x03\x01\x02\x00garbage\r\n\r\n");
    assert.match(await readAll(socket), /^HTTP\/1\.1 400 /);
  });

  test("a head trickled slowly is cut at the header timeout, while a real agent connects meanwhile", async () => {
    const slow = await connect();
    const closed = readAll(slow, 15_000);
    slow.write("GET / HTTP/1.1\r\n");
    const trickle = setInterval(() => slow.write("X-A: b\r\n"), 200);
    try {
      const started = Date.now();
      const agent = await agentThroughDoor("west");
      assert.ok(!agent.session.destroyed);
      await closed;
      const elapsed = Date.now() - started;
      assert.ok(elapsed < 10_000, `slow head closed after ${elapsed} ms`);
    } finally {
      clearInterval(trickle);
    }
    await waitUntil("both agents registered", () => server.backendCount() === 2);
  });

  test("an agent that goes away behind the hub apiserver is dropped at once, without a keepalive", async () => {
    // keepaliveTime is 0 here, as for a draining server (after GOAWAY it can no longer ping): the
    // close the apiserver passes on is the only news of the agent's end.
    const proxy = upgradeProxy(doorPort);
    proxy.listen(0, "127.0.0.1");
    await once(proxy, "listening");
    const address = proxy.address();
    assert.ok(address && typeof address !== "string");
    try {
      const before = server.backendCount();
      const socket = net.connect(address.port, "127.0.0.1");
      sockets.push(socket);
      await once(socket, "connect");
      socket.write(upgradeRequest());
      const { head } = await readHead(socket);
      assert.match(head, /^HTTP\/1\.1 101 /);
      const peer = await connectFakeAgent(
        { host: "127.0.0.1", port: doorPort, socket, tls: { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey } },
        { agentid: "north", agentidentifiers: "host=north" },
      );
      await peer.call.waitForHeaders();
      await waitUntil("the agent registered", () => server.backendCount() === before + 1);
      // The agent's process ends: its socket to the apiserver closes, and the apiserver closes
      // its connection to the door.
      peer.close();
      await waitUntil("the server dropped the agent", () => server.backendCount() === before, { timeoutMs: 5_000 });
    } finally {
      proxy.close();
    }
  });

  /**
   * Hostile upgraders that half-close (FIN) right after the head, or after a few bytes of TLS: the
   * FIN closes the socket at once (the door hands it over with allowHalfOpen false), not at the
   * agent port's TLS handshake timeout (about 10 s with these options), which a flood of them would
   * otherwise fill.
   */
  const halfClosers: [string, Buffer][] = [
    ["the head alone", Buffer.alloc(0)],
    ["the head and the first bytes of a TLS ClientHello", Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])],
    ["the head and bytes that are not TLS", Buffer.from("GET / HTTP/1.1\r\n\r\n")],
  ];
  for (const [what, tail] of halfClosers)
    test(`an upgrader that sends ${what}, then FIN: closed, never registered`, async () => {
      const before = server.backendCount();
      const socket = await connect();
      socket.on("error", () => undefined);
      const started = performance.now();
      socket.end(Buffer.concat([Buffer.from(upgradeRequest()), tail]));
      socket.resume();
      await once(socket, "close");
      const ms = performance.now() - started;
      assert.ok(ms < 5_000, `closed after ${Math.round(ms)} ms: held until the handshake timeout`);
      assert.equal(server.backendCount(), before);
    });
});
