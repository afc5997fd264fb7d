import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import * as tls from "node:tls";
import { once } from "node:events";
import { ConfigError } from "@cluster-proxy/api";
import { issueCertificate } from "@cluster-proxy/pki";
import { DialErrors, PacketType, type Packet } from "@cluster-proxy/protocol";
import { GrpcStatus, TlsFileError, type ConnectTarget } from "@cluster-proxy/tunnel";
import { recordingLogger } from "@cluster-proxy/kit/testing";
import { ProxyServer } from "./proxy-server.js";
import { sharedCaSubjects } from "./listeners/server-config.js";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { testServerOptions } from "./testing/server-options.js";
import { connectFakeAgent, connectFakeClient, type FakePeer } from "./testing/fake-peers.js";
import { tcpPort } from "@cluster-proxy/tunnel/testing";

function httpGet(p: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: "127.0.0.1", port: p, path }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject);
  });
}

/** Read from a socket until `predicate(all bytes)` holds or the socket ends. */
function readUntil(socket: net.Socket, predicate: (all: Buffer) => boolean, timeoutMs = 5000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let all = Buffer.alloc(0);
    const finish = (): void => {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("close", onEnd);
      socket.off("end", onEnd);
      resolve(all);
    };
    const onData = (c: Buffer): void => {
      all = Buffer.concat([all, c]);
      if (predicate(all)) finish();
    };
    const onEnd = (): void => finish();
    const timer = setTimeout(() => {
      socket.off("data", onData);
      reject(new Error(`timed out; got ${JSON.stringify(all.toString("latin1"))}`));
    }, timeoutMs);
    socket.on("data", onData);
    socket.once("end", onEnd);
    socket.once("close", onEnd);
  });
}

function expectType<T extends Packet["type"]>(p: Packet, type: T): Extract<Packet, { type: T }> {
  assert.equal(p.type, type, `expected packet type ${type}, got ${p.type}`);
  return p as Extract<Packet, { type: T }>;
}

/** A fake agent on `s`'s agent port, with the test PKI's agent certificate. */
function connectAgentTo(
  s: ProxyServer,
  pki: TestPki,
  metadata: Parameters<typeof connectFakeAgent>[1],
): Promise<FakePeer> {
  const tls = { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey };
  return connectFakeAgent({ host: "127.0.0.1", port: tcpPort(s.addresses().agent), tls }, metadata);
}

/** Client `c` dials `address`; the DIAL_REQ reaches `agent`, which has not answered yet. */
async function dialPending(c: FakePeer, agent: FakePeer, address: string, random: bigint): Promise<void> {
  c.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address, random } });
  expectType(await agent.packets.next(), PacketType.DIAL_REQ);
}

/** Client `c` dials `address` through `agent`, which accepts it as `connectID`; both ends see their packet. */
async function establish(
  c: FakePeer,
  agent: FakePeer,
  address: string,
  random: bigint,
  connectID: bigint,
): Promise<void> {
  await dialPending(c, agent, address, random);
  agent.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID, error: "" } });
  expectType(await c.packets.next(), PacketType.DIAL_RSP);
}

describe("ProxyServer in-process", () => {
  let pki: TestPki;
  let server: ProxyServer;
  let agentTarget: ConnectTarget;
  let clientTarget: ConnectTarget;
  const peers: FakePeer[] = [];
  const sockets: net.Socket[] = [];

  before(async () => {
    pki = await createTestPki();
    server = new ProxyServer(testServerOptions(pki));
    await server.start();
    const clientTls = { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
    const agentTls = { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey };
    agentTarget = { host: "127.0.0.1", port: tcpPort(server.addresses().agent), tls: agentTls };
    clientTarget = { host: "127.0.0.1", port: tcpPort(server.addresses().server), tls: clientTls };
  });

  after(async () => {
    for (const p of peers) p.close();
    for (const s of sockets) s.destroy();
    await server.close();
    pki.cleanup();
  });

  const agent = async (agentid: string | undefined, agentidentifiers?: string): Promise<FakePeer> => {
    const md: { agentid?: string; agentidentifiers?: string } = {};
    if (agentid !== undefined) md.agentid = agentid;
    if (agentidentifiers !== undefined) md.agentidentifiers = agentidentifiers;
    const p = await connectFakeAgent(agentTarget, md);
    peers.push(p);
    return p;
  };
  const client = async (): Promise<FakePeer> => {
    const p = await connectFakeClient(clientTarget);
    peers.push(p);
    return p;
  };
  const connectTls = async (withCert: "client" | "stranger" | "none"): Promise<tls.TLSSocket> => {
    const opts: tls.ConnectionOptions = {
      host: "127.0.0.1",
      port: tcpPort(server.addresses().httpConnect),
      ca: pki.ca,
      servername: "localhost",
    };
    if (withCert === "client") Object.assign(opts, { cert: pki.clientCert, key: pki.clientKey });
    if (withCert === "stranger") {
      Object.assign(opts, { cert: pki.strangerCert, key: pki.strangerKey });
    }
    const s = tls.connect(opts);
    sockets.push(s);
    s.on("error", () => undefined);
    await once(s, "secureConnect");
    return s;
  };

  let east: FakePeer;

  test("readyz is 500 without agents; agent gets serverid/servercount before any packet; then ready", async () => {
    const health = tcpPort(server.addresses().health);
    assert.deepEqual(await httpGet(health, "/healthz"), { status: 200, body: "ok" });
    assert.deepEqual(await httpGet(health, "/readyz"), { status: 500, body: "no connection to any proxy agent" });
    east = await agent("agent-east", "host=east&host=east.open-cluster-management-agent-addon");
    const headers = await east.call.waitForHeaders();
    assert.equal(headers["serverid"], "server-under-test");
    assert.equal(headers["servercount"], "3");
    assert.equal(east.packets.packetBeforeHeaders, false);
    assert.equal(server.backendCount(), 1);
    assert.deepEqual(await httpGet(health, "/readyz"), { status: 200, body: "ok" });
    assert.deepEqual(await httpGet(health, "/ready"), { status: 200, body: "ok" });
  });

  test("gRPC dial, DATA both ways and close through the fake agent", async () => {
    const c = await client();
    const random = 0x7123_4567_89ab_cdefn; // above 2^53
    c.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "east:443", random } });
    const req = expectType(await east.packets.next(), PacketType.DIAL_REQ);
    assert.deepEqual(req.dialRequest, { protocol: "tcp", address: "east:443", random });
    east.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID: 7n, error: "" } });
    const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
    assert.deepEqual(rsp.dialResponse, { random, connectID: 7n, error: "" });

    c.packets.send({ type: PacketType.DATA, data: { connectID: 7n, error: "", data: Buffer.from("ping") } });
    const up = expectType(await east.packets.next(), PacketType.DATA);
    assert.equal(up.data.connectID, 7n);
    assert.equal(Buffer.from(up.data.data).toString(), "ping");
    east.packets.send({ type: PacketType.DATA, data: { connectID: 7n, error: "", data: Buffer.from("pong") } });
    const down = expectType(await c.packets.next(), PacketType.DATA);
    assert.equal(Buffer.from(down.data.data).toString(), "pong");

    // DATA for a connection this stream does not have: dropped, answered with CLOSE_RSP.
    c.packets.send({ type: PacketType.DATA, data: { connectID: 99n, error: "", data: Buffer.from("x") } });
    const unknown = expectType(await c.packets.next(), PacketType.CLOSE_RSP);
    assert.deepEqual(unknown.closeResponse, { connectID: 99n, error: DialErrors.unknownConnectID });

    c.packets.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: 7n } });
    const closeReq = expectType(await east.packets.next(), PacketType.CLOSE_REQ);
    assert.equal(closeReq.closeRequest.connectID, 7n);
    east.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: 7n, error: "" } });
    const closeRsp = expectType(await c.packets.next(), PacketType.CLOSE_RSP);
    assert.equal(closeRsp.closeResponse.connectID, 7n);
    c.call.end();
    assert.equal((await c.packets.closed()).code, GrpcStatus.OK);
  });

  test("suffix addressing rewrites the dial address; agent dial errors are forwarded", async () => {
    const c = await client();
    c.packets.send({
      type: PacketType.DIAL_REQ,
      dialRequest: { protocol: "tcp", address: "grafana.monitoring.svc.east:3000", random: 11n },
    });
    const req = expectType(await east.packets.next(), PacketType.DIAL_REQ);
    assert.equal(req.dialRequest.address, "grafana.monitoring.svc:3000");
    assert.equal(req.dialRequest.random, 11n);
    const error = "dial tcp 10.0.0.1:3000: connect: connection refused";
    east.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 11n, connectID: 0n, error } });
    const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
    assert.equal(rsp.dialResponse.error, error);
  });

  test("dial with no matching agent gets No agent available", async () => {
    const c = await client();
    c.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "EAST:443", random: 5n } });
    const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
    assert.deepEqual(rsp.dialResponse, { random: 5n, connectID: 0n, error: DialErrors.noAgent });
  });

  test("a pending dial fails at once when its agent disconnects", async () => {
    const west = await agent("agent-west", "host=west");
    await west.call.waitForHeaders();
    const c = await client();
    await dialPending(c, west, "west:80", 21n);
    west.close();
    const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
    assert.equal(rsp.dialResponse.random, 21n);
    assert.match(
      rsp.dialResponse.error,
      /^no agent of cluster west is connected: the link of agent agent-west went down/,
    );
  });

  test("established connections get CLOSE_RSP when their agent goes away", async () => {
    const north = await agent("agent-north", "host=north");
    await north.call.waitForHeaders();
    const c = await client();
    await establish(c, north, "north:80", 31n, 1n);
    north.close();
    const close = expectType(await c.packets.next(), PacketType.CLOSE_RSP);
    assert.equal(close.closeResponse.connectID, 1n);
    assert.match(close.closeResponse.error, /^agent \S+ disconnected: /, "a cut connection says why");
  });

  test("client going away: DIAL_CLS for pending dials, CLOSE_REQ for established; late DIAL_RSP closed", async () => {
    const c1 = await client();
    await establish(c1, east, "east:1", 41n, 41n);
    c1.close();
    const closeReq = expectType(await east.packets.next(), PacketType.CLOSE_REQ);
    assert.equal(closeReq.closeRequest.connectID, 41n);
    east.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: 41n, error: "" } });

    const c2 = await client();
    await dialPending(c2, east, "east:2", 42n);
    c2.close();
    const dialCls = expectType(await east.packets.next(), PacketType.DIAL_CLS);
    assert.equal(dialCls.closeDial.random, 42n);
    // The agent answers anyway: the server asks it to close that connection.
    east.packets.send({ type: PacketType.DIAL_RSP, dialResponse: { random: 42n, connectID: 42n, error: "" } });
    const closeLate = expectType(await east.packets.next(), PacketType.CLOSE_REQ);
    assert.equal(closeLate.closeRequest.connectID, 42n);
  });

  test("HTTP CONNECT over mTLS: 200, pipelined bytes, data both ways, agent close ends the socket", async () => {
    const s = await connectTls("client");
    s.write("CONNECT east:8080 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nEARLY");
    const req = expectType(await east.packets.next(), PacketType.DIAL_REQ);
    assert.equal(req.dialRequest.address, "east:8080");
    const established = "HTTP/1.1 200 Connection Established\r\n\r\n";
    const head = readUntil(s, (all) => all.length >= established.length);
    east.packets.send({
      type: PacketType.DIAL_RSP,
      dialResponse: { random: req.dialRequest.random, connectID: 51n, error: "" },
    });
    assert.equal((await head).toString("latin1"), established);
    const early = expectType(await east.packets.next(), PacketType.DATA);
    assert.equal(early.data.connectID, 51n);
    assert.equal(Buffer.from(early.data.data).toString(), "EARLY");
    s.write("more");
    const more = expectType(await east.packets.next(), PacketType.DATA);
    assert.equal(Buffer.from(more.data.data).toString(), "more");
    const reply = readUntil(s, (all) => all.toString() === "reply");
    east.packets.send({ type: PacketType.DATA, data: { connectID: 51n, error: "", data: Buffer.from("reply") } });
    assert.equal((await reply).toString(), "reply");
    const ended = once(s, "end");
    east.packets.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: 51n, error: "" } });
    await ended;
  });

  test("HTTP CONNECT status mapping: no agent 500, agent error 502/504, no port 400, GET 405", async () => {
    const noAgent = await connectTls("client");
    const r1 = readUntil(noAgent, () => false);
    noAgent.write("CONNECT nowhere:443 HTTP/1.1\r\n\r\n");
    assert.equal(
      (await r1).toString(),
      "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\ncurrently no tunnels available: No agent available",
    );
    // The cluster named by the proxy URL's user (kubectl's proxy-url https://nowhere:@hub): 503
    // with the reason in the status line, which is all a Go client reports.
    const named = await connectTls("client");
    const rNamed = readUntil(named, () => false);
    named.write(
      `CONNECT kubernetes.default.svc:443 HTTP/1.1\r\nProxy-Authorization: Basic ${Buffer.from("nowhere:").toString("base64")}\r\n\r\n`,
    );
    assert.match((await rNamed).toString(), /^HTTP\/1\.1 503 No agent available for cluster nowhere\r\n/);

    for (const [error, status] of [
      ["dial tcp 127.0.0.1:1: connect: connection refused", 502],
      ["dial tcp 198.18.0.254:1234: i/o timeout", 504],
    ] as const) {
      const s = await connectTls("client");
      const r = readUntil(s, () => false);
      s.write("CONNECT east:1 HTTP/1.1\r\n\r\n");
      const req = expectType(await east.packets.next(), PacketType.DIAL_REQ);
      east.packets.send({
        type: PacketType.DIAL_RSP,
        dialResponse: { random: req.dialRequest.random, connectID: 0n, error },
      });
      const text = (await r).toString();
      assert.match(text, new RegExp(`^HTTP/1\\.1 ${status} `));
      assert.ok(text.endsWith(error), text);
    }

    const noPort = await connectTls("client");
    const r3 = readUntil(noPort, () => false);
    noPort.write("CONNECT east HTTP/1.1\r\n\r\n");
    assert.match((await r3).toString(), /^HTTP\/1\.1 400 Bad Request[^]*must be host:port/);

    const get = await connectTls("client");
    const r4 = readUntil(get, () => false);
    get.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert.match((await r4).toString(), /^HTTP\/1\.1 405 /);
  });

  test("HTTP CONNECT: a pending dial gets 503 naming the cluster at once when the agent disconnects", async () => {
    const south = await agent("agent-south", "host=south");
    await south.call.waitForHeaders();
    const s = await connectTls("client");
    const r = readUntil(s, () => false);
    s.write("CONNECT south:80 HTTP/1.1\r\n\r\n");
    expectType(await south.packets.next(), PacketType.DIAL_REQ);
    south.close();
    assert.match(
      (await r).toString(),
      /^HTTP\/1\.1 503 No agent available for cluster south\r\n[^]*\r\n\r\nno agent of cluster south is connected: the link of agent agent-south went down/,
    );
    // A new CONNECT while it is gone: 503 naming the cluster (seen before), also without the
    // Proxy-Authorization header; so does a DIAL_RSP on the gRPC door.
    const again = await connectTls("client");
    const r2 = readUntil(again, () => false);
    again.write("CONNECT south:80 HTTP/1.1\r\n\r\n");
    assert.match(
      (await r2).toString(),
      /^HTTP\/1\.1 503 No agent available for cluster south\r\n[^]*no agent of cluster south is connected to this proxy-server/,
    );
    const c = await client();
    c.packets.send({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "south:80", random: 9n } });
    const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
    assert.match(
      rsp.dialResponse.error,
      /^No agent available for cluster south: no agent of cluster south is connected/,
    );
  });

  test("clients and agents without a valid certificate are refused", async () => {
    for (const who of ["none", "stranger"] as const) {
      const s = await connectTls(who).catch(() => undefined);
      if (s) {
        // TLS 1.3: the server's refusal arrives after the client's handshake completes.
        s.write("CONNECT east:443 HTTP/1.1\r\n\r\n");
        const got = await readUntil(s, () => false).catch(() => Buffer.alloc(0));
        assert.equal(got.length, 0, `no response bytes for a client with cert=${who}`);
      }
    }
    const noCert = { ...agentTarget, tls: { ca: pki.ca } };
    // TLS 1.3: the connection may be up before the server refuses; either way the peer must
    // learn that (and why) it was refused, and the call must not end OK.
    const outcome = await connectFakeAgent(noCert, { agentid: "sneaky", agentidentifiers: "host=east" }).then(
      async (p) => {
        peers.push(p);
        const status = await p.packets.closed();
        return `call closed with status ${status.code}: ${status.details}`;
      },
      (err: Error) => `connect failed: ${err.message}`,
    );
    assert.doesNotMatch(outcome, /status 0:/);
    assert.match(outcome, /requires a client certificate: set proxy\.cert and proxy\.key/);
    assert.equal(server.backendCount(), 1, "only the east agent is registered");
  });

  test("separate trust: an agent certificate is refused at both client front doors, a client certificate at the agent port", async () => {
    const a = server.addresses();
    /** A TLS handshake with `cert`: resolves with the TLS error the server's alert produced, or "accepted". */
    const handshake = async (p: number, who: "client" | "agent", alpn: string): Promise<string> => {
      const s = tls.connect({
        host: "127.0.0.1",
        port: p,
        ca: pki.ca,
        servername: "localhost",
        cert: who === "client" ? pki.clientCert : pki.agentCert,
        key: who === "client" ? pki.clientKey : pki.agentKey,
        ALPNProtocols: [alpn],
      });
      sockets.push(s);
      const failed = new Promise<string>((resolve) => s.once("error", (err: Error) => resolve(err.message)));
      const connected = await Promise.race([once(s, "secureConnect").then(() => "connected"), failed]);
      if (connected !== "connected") return connected;
      // TLS 1.3: the server judges the client certificate after the client's handshake is done;
      // an accepted one gets the server's first bytes (HTTP/2 SETTINGS, or the CONNECT answer).
      const answered = new Promise<string>((resolve) => s.once("data", () => resolve("accepted")));
      s.write(
        alpn === "h2"
          ? "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
          : "GET / HTTP/1.1\r\nHost: x\r\n\r\n", // answered 405 without a dial
      );
      const closed = once(s, "close").then(() => "closed without an answer");
      return Promise.race([failed, answered, closed]);
    };
    // node's TLS server ends a connection whose certificate it refuses without a byte (or an alert)
    const refusal = /closed without an answer|unknown ca|alert|ECONNRESET|hang up/i;
    assert.match(
      await handshake(tcpPort(a.server), "agent", "h2"),
      refusal,
      "agent certificate at the gRPC front door",
    );
    assert.match(
      await handshake(tcpPort(a.httpConnect), "agent", "http/1.1"),
      refusal,
      "agent certificate at HTTP CONNECT",
    );
    assert.match(await handshake(tcpPort(a.agent), "client", "h2"), refusal, "client certificate at the agent port");
    // the right certificate at each door is accepted (the test itself works)
    assert.equal(await handshake(tcpPort(a.server), "client", "h2"), "accepted");
    assert.equal(await handshake(tcpPort(a.httpConnect), "client", "http/1.1"), "accepted");
    assert.equal(await handshake(tcpPort(a.agent), "agent", "h2"), "accepted");
    assert.equal(server.backendCount(), 1, "only the east agent is registered");
  });

  test("bad agent metadata ends the call with UNKNOWN", async () => {
    const missing = await agent(undefined, "host=x");
    const s1 = await missing.packets.closed();
    assert.equal(s1.code, GrpcStatus.UNKNOWN);
    assert.match(s1.details, /agent ID/);
    const semicolon = await agent("bad", "host=a;host=b");
    const s2 = await semicolon.packets.closed();
    assert.equal(s2.code, GrpcStatus.UNKNOWN);
    assert.match(s2.details, /semicolon/);
  });

  test("garbage bytes on every port do not hurt the server", async () => {
    const a = server.addresses();
    for (const p of [tcpPort(a.agent), tcpPort(a.server), tcpPort(a.httpConnect)]) {
      const s = net.connect(p, "127.0.0.1");
      sockets.push(s);
      s.on("error", () => undefined);
      s.resume();
      await once(s, "connect");
      s.write(Buffer.from("\x16\x03\x01\x00\x05hello garbage\r\n\r\n\x00\x00\x00"));
      s.end();
      await once(s, "close");
    }
    assert.deepEqual(await httpGet(tcpPort(a.health), "/healthz"), { status: 200, body: "ok" });
    assert.equal(server.backendCount(), 1);
  });

  test("metrics carry konnectivity names", async () => {
    const { status, body } = await httpGet(tcpPort(server.addresses().health), "/metrics");
    assert.equal(status, 200);
    assert.match(body, /konnectivity_network_proxy_server_ready_backends\{proxy_strategy="destHost"\} 1/);
    assert.match(body, /konnectivity_network_proxy_server_dial_failure_count\{reason="no_agent"\} 5/);
    assert.match(
      body,
      /konnectivity_network_proxy_server_stream_packets_total\{segment="from_agent",packet_type="DIAL_RSP"\}/,
    );
    assert.match(body, /cluster_proxy_server_backends\{identifier="east"\} 1/);
    const admin = await httpGet(tcpPort(server.addresses().admin), "/metrics");
    assert.match(admin.body, /konnectivity_network_proxy_server_grpc_connections/);
  });
});

describe("ProxyServer options and lifecycle", () => {
  let pki: TestPki;
  before(async () => {
    pki = await createTestPki();
  });
  after(() => pki.cleanup());

  test("options are validated before a server is built, naming the flag", () => {
    assert.throws(() => testServerOptions(pki, { clusterCaCert: "" }), /--cluster-ca-cert/);
    assert.throws(() => testServerOptions(pki, { serverCaCert: "" }), /--server-ca-cert/);
    assert.throws(
      () => testServerOptions(pki, { httpConnectPlain: true, httpConnectBindAddress: "0.0.0.0" }),
      (err: Error) => err instanceof ConfigError && /--http-connect-plain/.test(err.message),
    );
    assert.throws(() => testServerOptions(pki, { proxyStrategies: ["nearest"] }), /--proxy-strategies/);
    assert.throws(() => testServerOptions(pki, { certReloadInterval: -1 }), /--cert-reload-interval/);
  });

  test("shared trust between --server-ca-cert and --cluster-ca-cert is detected (the server warns)", () => {
    const client = pki.clientCa;
    const agent = pki.agentCa;
    assert.deepEqual(sharedCaSubjects(client, agent), []);
    assert.deepEqual(sharedCaSubjects(client, Buffer.concat([agent, client])), ["CN=cluster-proxy-client-ca"]);
    assert.deepEqual(sharedCaSubjects("garbage", client), []);
  });

  test("reloadCertificates: new handshakes get a replaced serving certificate, a bad key keeps the old one", async () => {
    const live = { cert: `${pki.dir}/live.crt`, key: `${pki.dir}/live.key` };
    copyFileSync(pki.paths.server.cert, live.cert);
    copyFileSync(pki.paths.server.key, live.key);
    const s = new ProxyServer(
      testServerOptions(pki, { serverCert: live.cert, serverKey: live.key, certReloadInterval: 0, mode: "grpc" }),
    );
    await s.start();
    const serial = async (): Promise<string> => {
      const c = tls.connect({
        host: "127.0.0.1",
        port: tcpPort(s.addresses().server),
        ca: pki.ca,
        servername: "localhost",
        ALPNProtocols: ["h2"],
      });
      c.on("error", () => undefined);
      try {
        await once(c, "secureConnect");
        return c.getPeerCertificate().serialNumber;
      } finally {
        c.destroy();
      }
    };
    try {
      const before = await serial();
      assert.deepEqual(await s.reloadCertificates(), ["unchanged", "unchanged"]);
      const servingCa = {
        certPem: readFileSync(pki.paths.ca.cert, "utf8"),
        keyPem: readFileSync(`${pki.dir}/ca.key`, "utf8"),
      };
      const next = await issueCertificate(servingCa, {
        commonName: "next",
        dnsNames: ["localhost"],
        ipAddresses: ["127.0.0.1"],
        usage: "server",
        validityDays: 1,
      });
      writeFileSync(live.key, next.keyPem);
      writeFileSync(live.cert, next.certPem);
      assert.deepEqual(await s.reloadCertificates(), ["unchanged", "reloaded"]);
      const after = await serial();
      assert.notEqual(after, before);
      assert.equal(after, new X509Certificate(next.certPem).serialNumber);
      writeFileSync(live.key, readFileSync(pki.paths.server.key));
      assert.deepEqual(await s.reloadCertificates(), ["unchanged", "failed"]);
      assert.equal(await serial(), after);
      const text = await s.metrics.registry.metrics();
      assert.match(text, /cluster_proxy_server_certificate_reloads_total\{listener="front",result="success"\} 1/);
      assert.match(text, /cluster_proxy_server_certificate_reloads_total\{listener="front",result="failure"\} 1/);
      assert.match(text, /cluster_proxy_server_certificate_expiry_timestamp_seconds\{flag="--cluster-cert"\} \d+/);
      const expiry = (flag: string): number =>
        Number(
          new RegExp(`cluster_proxy_server_certificate_expiry_timestamp_seconds\\{flag="${flag}"\\} (\\d+)`).exec(
            text,
          )?.[1],
        );
      assert.equal(expiry("--server-cert"), Date.parse(new X509Certificate(next.certPem).validTo) / 1000);
      assert.equal(
        expiry("--server-ca-cert"),
        Date.parse(new X509Certificate(readFileSync(pki.paths.clientCa.cert)).validTo) / 1000,
      );
    } finally {
      await s.close();
    }
  });

  test("a bad TLS file is the same CP_ERR_TLS_FILE naming the flag and file at start and on reload", async () => {
    const live = { cert: `${pki.dir}/same-code.crt`, key: `${pki.dir}/same-code.key` };
    copyFileSync(pki.paths.server.cert, live.cert);
    writeFileSync(live.key, "not a key\n");
    const options = testServerOptions(pki, {
      serverCert: live.cert,
      serverKey: live.key,
      certReloadInterval: 0,
      mode: "grpc",
    });
    const atStart = await new ProxyServer(options).start().then(
      () => assert.fail("started with a bad --server-key"),
      (err: unknown) => err,
    );
    assert.ok(atStart instanceof TlsFileError, String(atStart));
    assert.equal(atStart.code, "CP_ERR_TLS_FILE");
    assert.equal(atStart.flag, "--server-key");
    assert.match(atStart.message, new RegExp(`^--server-key: ${live.key}: not a PEM private key`));
    copyFileSync(pki.paths.server.key, live.key);
    const logger = recordingLogger();
    const errors = (): Record<string, unknown>[] => logger.lines.filter((l) => l.level === "error").map((l) => l.obj);
    const s = new ProxyServer(options, { logger });
    await s.start();
    try {
      writeFileSync(live.key, "not a key\n");
      assert.deepEqual(await s.reloadCertificates(), ["unchanged", "failed"]);
      assert.equal(errors().length, 1);
      assert.deepEqual(
        { code: errors()[0]!["code"], flag: errors()[0]!["flag"], err: errors()[0]!["err"] },
        { code: atStart.code, flag: atStart.flag, err: atStart.message },
      );
    } finally {
      await s.close();
    }
  });

  test("one lifecycle: start and drain run once, a start after close is refused", async () => {
    const s = new ProxyServer(testServerOptions(pki));
    const first = s.start();
    assert.equal(s.start(), first, "a second start() is the first one's promise");
    await first;
    const drained = s.drain();
    assert.equal(s.drain(), drained, "a second drain() is the first one's promise");
    assert.equal(s.readiness(), "draining");
    assert.equal(await drained, true);
    const closed = s.close();
    assert.equal(s.close(), closed, "a second close() is the first one's promise");
    await closed;
    await assert.rejects(s.start(), /proxy-server is closed/);
    const never = new ProxyServer(testServerOptions(pki));
    await never.close();
    await assert.rejects(never.start(), /proxy-server is closed/);
  });

  test("start rejects unreadable files and busy ports naming the flag", async () => {
    const bad = new ProxyServer(testServerOptions(pki, { clusterCert: `${pki.dir}/missing.crt` }));
    await assert.rejects(bad.start(), /^TlsFileError: --cluster-cert: .*missing\.crt: cannot read: ENOENT/);
    const blocker = net.createServer();
    blocker.listen(0, "127.0.0.1");
    await once(blocker, "listening");
    const busy = new ProxyServer(testServerOptions(pki, { agentPort: tcpPort(blocker.address()) }));
    await assert.rejects(busy.start(), /--agent-port: cannot listen/);
    blocker.close();
  });

  test("a start failure is a ConfigError that keeps the listen error as its cause", async () => {
    const blocker = net.createServer();
    blocker.listen(0, "127.0.0.1");
    await once(blocker, "listening");
    const taken = tcpPort(blocker.address());
    try {
      const busy = new ProxyServer(testServerOptions(pki, { serverPort: taken }));
      const err = await busy.start().then(
        () => assert.fail("start() succeeded on a busy port"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof ConfigError);
      assert.equal(err.code, "CP_ERR_CONFIG");
      const cause = err.cause as NodeJS.ErrnoException & { port?: number; address?: string };
      assert.equal(cause.code, "EADDRINUSE");
      assert.equal(cause.port, taken);
      assert.equal(cause.address, "127.0.0.1");
      await busy.close();
    } finally {
      blocker.close();
    }
  });

  test("backend dial timeout answers the client; plain CONNECT on loopback", async () => {
    const s = new ProxyServer(
      testServerOptions(pki, {
        backendDialTimeout: 200,
        httpConnectPlain: true,
        httpConnectBindAddress: "127.0.0.1",
        proxyStrategies: ["default"],
      }),
    );
    await s.start();
    const tlsOpts = { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
    const a = await connectAgentTo(s, pki, { agentid: "slow", agentidentifiers: "" });
    try {
      await a.call.waitForHeaders();
      const c = await connectFakeClient({ host: "127.0.0.1", port: tcpPort(s.addresses().server), tls: tlsOpts });
      await dialPending(c, a, "x:1", 9n);
      const rsp = expectType(await c.packets.next(), PacketType.DIAL_RSP);
      assert.equal(rsp.dialResponse.error, DialErrors.backendDialTimeout);
      expectType(await a.packets.next(), PacketType.DIAL_CLS);
      c.close();

      const plain = net.connect(tcpPort(s.addresses().httpConnect), "127.0.0.1");
      plain.on("error", () => undefined);
      const r = readUntil(plain, () => false);
      plain.write("CONNECT x:1 HTTP/1.1\r\n\r\n");
      expectType(await a.packets.next(), PacketType.DIAL_REQ);
      assert.match((await r).toString(), /^HTTP\/1\.1 504 Gateway Timeout[^]*Backend dial timeout/);
    } finally {
      a.close();
      await s.close();
    }
  });

  test("Unix sockets: plain gRPC and HTTP CONNECT front doors without server certificates", async () => {
    const s = new ProxyServer(
      testServerOptions(pki, {
        serverPort: 0,
        udsName: `${pki.dir}/grpc.sock`,
        httpConnectPort: 0,
        httpConnectUdsName: `${pki.dir}/connect.sock`,
        serverCert: "",
        serverKey: "",
        serverCaCert: "",
      }),
    );
    await s.start();
    assert.equal(s.addresses().server, `${pki.dir}/grpc.sock`);
    assert.equal(s.addresses().httpConnect, `${pki.dir}/connect.sock`);
    const a = await connectAgentTo(s, pki, { agentid: "uds-agent", agentidentifiers: "host=east" });
    try {
      await a.call.waitForHeaders();
      const c = await connectFakeClient({ udsPath: `${pki.dir}/grpc.sock` });
      c.packets.send({
        type: PacketType.DIAL_REQ,
        dialRequest: { protocol: "tcp", address: "east:6443", random: 77n },
      });
      const req = expectType(await a.packets.next(), PacketType.DIAL_REQ);
      assert.equal(req.dialRequest.address, "east:6443");
      c.close();

      const sock = net.connect(`${pki.dir}/connect.sock`);
      sock.on("error", () => undefined);
      const r = readUntil(sock, () => false);
      sock.write("CONNECT west:1 HTTP/1.1\r\n\r\n");
      assert.match((await r).toString(), /^HTTP\/1\.1 500 Internal Server Error/);
    } finally {
      a.close();
      await s.close();
    }
  });

  test("close() completes whatever the open sockets do: silent, mid-handshake, half-closed, on every port", async () => {
    // Issue 25: a connection still in (or never starting) its TLS handshake kept the listening
    // server open until node's 120 s handshake timeout, so shutdown hung.
    const s = new ProxyServer(testServerOptions(pki, { gracefulShutdownTimeout: 1000 }));
    await s.start();
    const a = s.addresses();
    const ports = [tcpPort(a.server), tcpPort(a.httpConnect), tcpPort(a.agent), tcpPort(a.health), tcpPort(a.admin)];
    const sockets: net.Socket[] = [];
    const open = (p: number, first?: Buffer, end = false): void => {
      const sock = net.connect(p, "127.0.0.1");
      sock.on("error", () => undefined);
      sock.once("connect", () => {
        if (first) sock.write(first);
        if (end) sock.end();
      });
      sockets.push(sock);
    };
    // The first bytes of a TLS ClientHello record, never completed.
    const partialHello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
    for (const p of ports) {
      open(p);
      open(p, partialHello);
      open(p, partialHello, true);
    }
    await Promise.all(sockets.map((sock) => once(sock, "connect")));
    const started = Date.now();
    try {
      await Promise.race([
        s.close(),
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error("close() still running after 10 s")), 10_000).unref(),
        ),
      ]);
      assert.ok(Date.now() - started < 10_000);
    } finally {
      for (const sock of sockets) sock.destroy();
    }
  });
});
