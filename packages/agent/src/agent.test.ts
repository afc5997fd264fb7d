import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import * as tls from "node:tls";
import { once } from "node:events";
import { X509Certificate } from "node:crypto";
import { appendFileSync, copyFileSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";
import { ConfigError, type AgentOptions, type AgentOptionsInput } from "@cluster-proxy/api";
import { agentClusterUri, issueCertificate } from "@cluster-proxy/pki";
import { Metadata, PacketType, type Packet } from "@cluster-proxy/protocol";
import { silentLogger, type Logger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { ProxyAgent } from "./agent.js";
import { validateAgentOptions } from "./agent-config.js";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { FakeProxyServer, TcpBalancer, startEchoServer, type FakeAgentStream } from "./testing/fake-proxy-server.js";
import { freePort, waitUntil } from "@cluster-proxy/tunnel/testing";
import { TlsFileError } from "@cluster-proxy/tunnel";

let pki: TestPki;
let echo: Awaited<ReturnType<typeof startEchoServer>>;

before(async () => {
  pki = await createTestPki();
  echo = await startEchoServer();
});
after(async () => {
  await echo.close();
  pki.cleanup();
});

/** A fake proxy server with the test PKI, listening on a free loopback port. */
async function listeningServer(config: ConstructorParameters<typeof FakeProxyServer>[1]): Promise<FakeProxyServer> {
  const server = new FakeProxyServer(pki, config);
  await server.listen(0);
  return server;
}

/** The options of a test agent, as given (not validated). */
function input(port: number, over: Partial<AgentOptionsInput> = {}): AgentOptionsInput {
  return {
    proxyServerHost: "127.0.0.1",
    proxyServerPort: port,
    caCert: pki.paths.ca.cert,
    agentCert: pki.paths.agent.cert,
    agentKey: pki.paths.agent.key,
    serviceAccountTokenPath: "",
    agentId: "agent-1",
    agentIdentifiers: "host=east",
    clusterName: "",
    apiserverAddress: "kubernetes.default.svc:443",
    healthServerHost: "127.0.0.1",
    healthServerPort: 0,
    adminBindAddress: "127.0.0.1",
    adminServerPort: 0,
    syncInterval: 100,
    syncIntervalCap: 1000,
    keepaliveTime: 0,
    keepaliveTimeout: 1000,
    dialTimeout: 2000,
    connectionStallTimeout: 60_000,
    drainGracePeriod: 1000,
    logLevel: "silent",
    ...over,
  };
}

/** The options of a test agent, validated as a ProxyAgent takes them. */
function options(port: number, over: Partial<AgentOptionsInput> = {}): AgentOptions {
  return validateAgentOptions(input(port, over));
}

const isType =
  (type: number) =>
  (p: Packet): boolean =>
    p.type === type;

function dialReq(address: string, random: bigint): Packet {
  return { type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address, random } };
}

/** Dial through the agent and return the connectID (asserting success). */
async function dial(stream: FakeAgentStream, address: string, random: bigint): Promise<bigint> {
  stream.send(dialReq(address, random));
  const rsp = await stream.next((p) => "dialResponse" in p && p.dialResponse.random === random);
  assert.ok("dialResponse" in rsp);
  assert.equal(rsp.dialResponse.error, "");
  assert.ok(rsp.dialResponse.connectID > 0n);
  return rsp.dialResponse.connectID;
}

/** Collect DATA for `connectID` until `bytes` bytes arrived. */
async function receiveData(stream: FakeAgentStream, connectID: bigint, bytes: number): Promise<Buffer[]> {
  const chunks: Buffer[] = [];
  let got = 0;
  for (let i = 0; i < 10_000 && got < bytes; i++) {
    const p = await stream.next((q) => "data" in q && q.data.connectID === connectID);
    assert.ok("data" in p);
    chunks.push(Buffer.from(p.data.data));
    got += p.data.data.length;
  }
  return chunks;
}

describe("ProxyAgent against a fake proxy server", () => {
  it("reloads --agent-cert/--agent-key: the open tunnel stays, the next connection presents the new certificate; a bad key is refused", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cp-agent-reload-"));
    const certPath = join(dir, "tls.crt");
    const keyPath = join(dir, "tls.key");
    await writeFile(certPath, pki.agentCert);
    await writeFile(keyPath, pki.agentKey);
    const lines: { level: string; obj: Record<string, unknown>; msg?: string }[] = [];
    const at = (level: string) => (obj: Record<string, unknown>, msg?: string) => void lines.push({ level, obj, msg });
    const logger: Logger = {
      debug: at("debug"),
      info: at("info"),
      warn: at("warn"),
      error: at("error"),
      child: () => logger,
    };
    const server = await listeningServer({ serverID: "server-r", serverCount: 1 });
    const agent = new ProxyAgent(
      options(server.port, { agentCert: certPath, agentKey: keyPath, certReloadInterval: 50 }),
      { logger },
    );
    const peerSerial = (n: number): string =>
      (server.streams[n]!.call.http2Stream.session!.socket as TLSSocket).getPeerCertificate().serialNumber;
    const reloads = async (result: string): Promise<number> => {
      const m = (await agent.metrics.registry.getSingleMetric("cluster_proxy_agent_certificate_reloads_total")!.get())
        .values;
      return m.find((v) => v.labels["result"] === result)?.value ?? 0;
    };
    try {
      await agent.start();
      const first = await server.stream(0);
      await waitUntil("connected", () => agent.connectedServers().length === 1, { timeoutMs: 5000 });
      assert.equal(peerSerial(0), new X509Certificate(pki.agentCert).serialNumber);

      // a key that is not the certificate's: refused, named, counted; the old pair stays
      await writeFile(keyPath, pki.serverKey);
      await waitUntil("the bad key to be refused", () => lines.some((l) => l.level === "error"), { timeoutMs: 5000 });
      assert.equal(await reloads("failure"), 1);
      const refusal = lines.find((l) => l.level === "error");
      assert.equal(refusal?.obj["flag"], "--agent-key");
      assert.equal(refusal?.obj["file"], keyPath);
      // the same files at start: the same code and message as the refusal on reload
      const late = new ProxyAgent(options(server.port, { agentCert: certPath, agentKey: keyPath }));
      const atStart = await late.start().then(
        () => assert.fail("started with a key not matching --agent-cert"),
        (err: unknown) => err,
      );
      await late.close();
      assert.ok(atStart instanceof TlsFileError, String(atStart));
      assert.equal(refusal?.obj["code"], "CP_ERR_TLS_FILE");
      assert.deepEqual(
        { code: refusal?.obj["code"], flag: refusal?.obj["flag"], err: refusal?.obj["err"] },
        { code: atStart.code, flag: atStart.flag, err: atStart.message },
      );

      // a new pair from the agent CA
      const agentCa = {
        certPem: readFileSync(pki.paths.agentCa.cert, "utf8"),
        keyPem: readFileSync(pki.paths.agentCa.key, "utf8"),
      };
      const renewed = await issueCertificate(agentCa, {
        commonName: "renewed",
        uris: [agentClusterUri("east")],
        usage: "client",
        validityDays: 1,
      });
      await writeFile(keyPath, renewed.keyPem);
      await writeFile(certPath, renewed.certPem);
      await waitUntil(
        "the new pair to be loaded",
        () => lines.some((l) => l.level === "info" && /reloaded TLS certificates of the agent/.test(l.msg ?? "")),
        { timeoutMs: 5000 },
      );
      assert.equal(await reloads("success"), 1);
      const expiry = (
        await agent.metrics.registry.getSingleMetric("cluster_proxy_agent_certificate_expiry_timestamp_seconds")!.get()
      ).values;
      const at = (flag: string): number | undefined => expiry.find((v) => v.labels["flag"] === flag)?.value;
      assert.equal(at("--agent-cert"), Date.parse(new X509Certificate(renewed.certPem).validTo) / 1000);
      assert.equal(at("--ca-cert"), Date.parse(new X509Certificate(pki.ca).validTo) / 1000);
      assert.equal(first.status, undefined, "the open tunnel is not dropped");
      assert.equal(server.streams.length, 1);

      // the next connection (after the server restarts) presents the new certificate
      await server.close();
      await server.listen(server.port);
      await server.stream(1, 10_000);
      assert.equal(peerSerial(1), new X509Certificate(renewed.certPem).serialNumber);
    } finally {
      await agent.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("sends its metadata, reads the handshake and relays a connection to an endpoint", async () => {
    const server = await listeningServer({ serverID: "server-a", serverCount: 1 });
    const healthPort = await freePort();
    const adminPort = await freePort();
    const agent = new ProxyAgent(options(server.port, { healthServerPort: healthPort, adminServerPort: adminPort }));
    try {
      await agent.start();
      assert.equal(agent.addresses().health?.port, healthPort);
      assert.equal(agent.addresses().admin?.port, adminPort);
      const stream = await server.stream(0);
      assert.equal(stream.meta(Metadata.agentID), "agent-1");
      assert.equal(stream.meta(Metadata.agentIdentifiers), "host=east");
      await waitUntil("connected", () => agent.connectedServers().length === 1, { timeoutMs: 2000 });
      assert.deepEqual(agent.connectedServers(), ["server-a"]);

      const ready = await fetch(`http://127.0.0.1:${healthPort}/readyz`);
      assert.equal(ready.status, 200);

      // random above 2^53 survives the round trip
      const random = 2n ** 62n + 12345n;
      const id = await dial(stream, `127.0.0.1:${echo.port}`, random);
      stream.send({ type: PacketType.DATA, data: { connectID: id, error: "", data: Buffer.from("hello") } });
      const echoed = await receiveData(stream, id, 5);
      assert.equal(Buffer.concat(echoed).toString(), "hello");

      // a big write comes back in DATA packets of up to 64 KiB (not 4 KiB)
      const big = Buffer.alloc(512 * 1024, 7);
      stream.send({ type: PacketType.DATA, data: { connectID: id, error: "", data: big } });
      const back = await receiveData(stream, id, big.length);
      assert.ok(Buffer.concat(back).equals(big));
      assert.ok(back.every((c) => c.length <= 64 * 1024));
      assert.ok(
        back.some((c) => c.length > 4096),
        "expected chunks larger than 4 KiB",
      );

      // the endpoint closes: CLOSE_RSP{connectID}
      for (const s of echo.sockets) s.end();
      const closeRsp = await stream.next(isType(PacketType.CLOSE_RSP));
      assert.ok("closeResponse" in closeRsp);
      assert.deepEqual(closeRsp.closeResponse, { connectID: id, error: "" });
      await waitUntil("no endpoint connection", () => agent.openEndpointConnections === 0, { timeoutMs: 2000 });

      // the client closes: CLOSE_REQ -> CLOSE_RSP, endpoint socket closed
      const id2 = await dial(stream, `127.0.0.1:${echo.port}`, 42n);
      assert.ok(id2 > id, "connectIDs come from one increasing counter");
      await waitUntil("endpoint connected", () => echo.sockets.size === 1, { timeoutMs: 2000 });
      assert.equal(agent.openEndpointConnections, 1);
      stream.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: id2 } });
      const closeRsp2 = await stream.next(isType(PacketType.CLOSE_RSP));
      assert.ok("closeResponse" in closeRsp2);
      assert.deepEqual(closeRsp2.closeResponse, { connectID: id2, error: "" });
      await waitUntil("endpoint closed", () => echo.sockets.size === 0, { timeoutMs: 2000 });

      // unknown connections
      stream.send({ type: PacketType.DATA, data: { connectID: 0n, error: "", data: Buffer.from("x") } });
      stream.send({ type: PacketType.DATA, data: { connectID: 999_999n, error: "", data: Buffer.from("x") } });
      const unrec = await stream.next(isType(PacketType.CLOSE_RSP));
      assert.ok("closeResponse" in unrec);
      assert.deepEqual(unrec.closeResponse, { connectID: 999_999n, error: "unrecognized connectID" });
      stream.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: 888_888n } });
      const unknown = await stream.next(isType(PacketType.CLOSE_RSP));
      assert.ok("closeResponse" in unknown);
      assert.deepEqual(unknown.closeResponse, { connectID: 888_888n, error: "Unknown connectID" });
      assert.equal(stream.packets.length, 0, "DATA for connectID 0 is dropped silently");

      // refused dial: Go's wording
      stream.send(dialReq("127.0.0.1:1", 7n));
      const refused = await stream.next(isType(PacketType.DIAL_RSP));
      assert.ok("dialResponse" in refused);
      assert.equal(refused.dialResponse.random, 7n);
      assert.equal(refused.dialResponse.connectID, 0n);
      assert.equal(refused.dialResponse.error, "dial tcp 127.0.0.1:1: connect: connection refused");

      const metrics = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
      for (const name of [
        "konnectivity_network_proxy_agent_open_server_connections 1",
        "konnectivity_network_proxy_agent_known_server_count 1",
        "konnectivity_network_proxy_agent_open_endpoint_connections 0",
        'konnectivity_network_proxy_agent_endpoint_dial_failure_total{reason="unknown"} 1',
        "konnectivity_network_proxy_agent_dial_duration_seconds_count 2",
        'konnectivity_network_proxy_agent_stream_packets_total{segment="to_agent",packet_type="DIAL_REQ"} 3',
      ]) {
        assert.ok(metrics.includes(name), `metrics lack ${name}`);
      }
      assert.equal((await fetch(`http://127.0.0.1:${healthPort}/healthz`)).status, 200);
      assert.equal((await fetch(`http://127.0.0.1:${healthPort}/ready`)).status, 200);
      const admin = await fetch(`http://127.0.0.1:${adminPort}/metrics`);
      assert.equal(admin.status, 200);
      assert.match(await admin.text(), /konnectivity_network_proxy_agent_open_server_connections 1/);
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("abandons a pending dial on DIAL_CLS and times out hanging dials with Go's i/o timeout", async () => {
    const server = await listeningServer({ serverID: "server-b", serverCount: 1 });
    const hanging: net.Socket[] = [];
    const agent = new ProxyAgent(options(server.port, { dialTimeout: 200, agentIdentifiers: "" }), {
      connectEndpoint: () => {
        const s = new net.Socket(); // never connects
        hanging.push(s);
        return s;
      },
    });
    try {
      await agent.start();
      const stream = await server.stream(0);
      assert.equal(stream.meta(Metadata.agentIdentifiers), "", "the header is sent even when empty");
      stream.send(dialReq("10.1.2.3:443", 100n));
      await waitUntil("dial started", () => hanging.length === 1, { timeoutMs: 2000 });
      stream.send({ type: PacketType.DIAL_CLS, closeDial: { random: 100n } });
      await waitUntil("dial abandoned", () => hanging[0]!.destroyed, { timeoutMs: 2000 });
      await waitUntil("no endpoint connection", () => agent.openEndpointConnections === 0, { timeoutMs: 1000 });

      stream.send(dialReq("10.1.2.3:443", 101n));
      const rsp = await stream.next(isType(PacketType.DIAL_RSP));
      assert.ok("dialResponse" in rsp);
      assert.equal(rsp.dialResponse.random, 101n, "no DIAL_RSP was sent for the abandoned dial");
      assert.equal(rsp.dialResponse.error, "dial tcp 10.1.2.3:443: i/o timeout");
      const metrics = await agent.metrics.registry.metrics();
      assert.ok(metrics.includes('konnectivity_network_proxy_agent_endpoint_dial_failure_total{reason="timeout"} 1'));
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("maps <cluster-name>:<port> to the apiserver address (names starting with a digit work)", async () => {
    const server = new FakeProxyServer(pki, { serverID: "server-c", serverCount: 1 });
    const tokenPath = join(pki.dir, "token");
    writeFileSync(tokenPath, "tok-123\n");
    await server.listen(0);
    const agent = new ProxyAgent(
      options(server.port, {
        clusterName: "1east",
        agentIdentifiers: "",
        apiserverAddress: "127.0.0.1",
        serviceAccountTokenPath: tokenPath,
      }),
    );
    try {
      await agent.start();
      const stream = await server.stream(0);
      assert.equal(stream.meta(Metadata.agentIdentifiers), "host=1east");
      assert.equal(stream.meta(Metadata.authorization), "Bearer tok-123");
      // no port in --apiserver-address: the requested port is kept
      const id = await dial(stream, `1east:${echo.port}`, 5n);
      stream.send({ type: PacketType.DATA, data: { connectID: id, error: "", data: Buffer.from("ping") } });
      assert.equal(Buffer.concat(await receiveData(stream, id, 4)).toString(), "ping");
      stream.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: id } });
      await stream.next(isType(PacketType.CLOSE_RSP));
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("shutting down with a connection open tells its client in-band (CLOSE_RSP 'agent shutting down'), then ends the stream cleanly, a draining server's too", async () => {
    const server = await listeningServer({ serverID: "server-s", serverCount: 1 });
    const agent = new ProxyAgent(options(server.port));
    try {
      await agent.start();
      const stream = await server.stream(0);
      const id = await dial(stream, `127.0.0.1:${echo.port}`, 1n);
      // The server drains (GOAWAY), as a proxy-server does on SIGTERM: it can no longer ping.
      server.goaway();
      await agent.close();
      const rsp = await stream.next((p) => "closeResponse" in p && p.closeResponse.connectID === id);
      assert.ok("closeResponse" in rsp);
      assert.equal(rsp.closeResponse.error, "agent shutting down");
      assert.equal((await stream.closed()).code, 0, "the agent ended its stream (END_STREAM), no reset");
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("connects to servercount distinct servers behind a round-robin balancer and drains them all", async () => {
    const a = new FakeProxyServer(pki, { serverID: "ha-1", serverCount: 2 });
    const b = new FakeProxyServer(pki, { serverID: "ha-2", serverCount: 2 });
    await a.listen(0);
    await b.listen(0);
    const lb = new TcpBalancer(() => [a.port, b.port]);
    await lb.listen();
    const agent = new ProxyAgent(options(lb.port));
    try {
      await agent.start();
      await waitUntil("two servers", () => agent.connectedServers().length === 2, { timeoutMs: 3000 });
      assert.deepEqual(agent.connectedServers().sort(), ["ha-1", "ha-2"]);
      const metrics = await agent.metrics.registry.metrics();
      assert.ok(metrics.includes("konnectivity_network_proxy_agent_known_server_count 2"));
      assert.ok(metrics.includes("konnectivity_network_proxy_agent_open_server_connections 2"));

      // DRAIN goes out at once on every (idle) stream; no endpoint connection to wait for
      assert.equal(await agent.drain(), true);
      for (const server of [a, b]) {
        const [stream] = server.openStreams();
        assert.ok(stream);
        await stream.next(isType(PacketType.DRAIN), 2000);
      }
      // existing traffic keeps flowing after DRAIN
      const [streamA] = a.openStreams();
      assert.ok(streamA);
      const id = await dial(streamA, `127.0.0.1:${echo.port}`, 9n);
      streamA.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: id } });
      await streamA.next(isType(PacketType.CLOSE_RSP));
    } finally {
      await agent.close();
      await lb.close();
      await a.close();
      await b.close();
    }
  });

  it("a server that sends GOAWAY (draining) keeps its stream, and the agent connects to another replica", async () => {
    const a = new FakeProxyServer(pki, { serverID: "leaving", serverCount: 1 });
    const b = new FakeProxyServer(pki, { serverID: "staying", serverCount: 1 });
    await a.listen(0);
    await b.listen(0);
    const lb = new TcpBalancer(() => [a.port, b.port]);
    await lb.listen();
    const agent = new ProxyAgent(options(lb.port));
    try {
      await agent.start();
      await waitUntil("one server", () => agent.connectedServers().length === 1, { timeoutMs: 3000 });
      assert.deepEqual(agent.connectedServers(), ["leaving"]);
      a.goaway();
      await waitUntil("another replica", () => agent.connectedServers().includes("staying"), { timeoutMs: 10_000 });
      // The leaving server's stream still serves what it is asked until it closes.
      const [stream] = a.openStreams();
      assert.ok(stream);
      const id = await dial(stream, `127.0.0.1:${echo.port}`, 5n);
      stream.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: id } });
      await stream.next(isType(PacketType.CLOSE_RSP));
    } finally {
      await agent.close();
      await lb.close();
      await a.close();
      await b.close();
    }
  });

  it("closes a duplicate server connection and keeps one stream", async () => {
    const a = await listeningServer({ serverID: "dup-1", serverCount: 2 });
    const agent = new ProxyAgent(options(a.port));
    try {
      await agent.start();
      const dup = await a.stream(1, 3000); // the second dial reaches the same server
      await dup.closed(2000);
      await a.stream(2, 3000); // and the loop keeps trying (no backoff)
      assert.deepEqual(agent.connectedServers(), ["dup-1"]);
      await waitUntil("duplicates closed", () => a.openStreams().length === 1, { timeoutMs: 2000 });
      assert.ok(!a.streams[0]!.status, "the first stream stays open");
    } finally {
      await agent.close();
      await a.close();
    }
  });

  it("reconnects after the server restarts, within the backoff cap", async () => {
    const server = await listeningServer({ serverID: "restart-1", serverCount: 1 });
    const healthPort = await freePort();
    let failures = 0;
    const logger: Logger = {
      ...silentLogger,
      warn: (_obj, msg) => {
        if (msg === "cannot connect to proxy server") failures++;
      },
      child: () => logger,
    };
    const agent = new ProxyAgent(options(server.port, { healthServerPort: healthPort }), { logger });
    try {
      await agent.start();
      await waitUntil("connected", () => agent.connectedServers().length === 1, { timeoutMs: 2000 });
      const id = await dial(await server.stream(0), `127.0.0.1:${echo.port}`, 11n);
      assert.ok(id > 0n);
      await waitUntil("endpoint connected", () => echo.sockets.size === 1, { timeoutMs: 2000 });

      await server.close();
      await waitUntil("disconnected", () => agent.connectedServers().length === 0, { timeoutMs: 2000 });
      // the dead stream's endpoint sockets are closed
      await waitUntil("endpoint sockets closed", () => echo.sockets.size === 0, { timeoutMs: 2000 });
      assert.equal((await fetch(`http://127.0.0.1:${healthPort}/readyz`)).status, 503);

      // let a few attempts fail, then come back: the cap (1 s) bounds the wait
      // let the backoff grow past its cap (each failed attempt logs one warning)
      await waitUntil("five failed attempts", () => failures >= 5, { timeoutMs: 5000 });
      const back = Date.now();
      await server.listen();
      await waitUntil("reconnected", () => agent.connectedServers().length === 1, { timeoutMs: 2500 });
      assert.ok(Date.now() - back < 2500);
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("resumes its TLS session when it reconnects, and not after its certificate files were reloaded", async () => {
    const server = await listeningServer({ serverID: "resume-1", serverCount: 1 });
    const cert = join(pki.dir, "agent-resume.crt");
    const key = join(pki.dir, "agent-resume.key");
    copyFileSync(pki.paths.agent.cert, cert);
    copyFileSync(pki.paths.agent.key, key);
    const agent = new ProxyAgent(options(server.port, { agentCert: cert, agentKey: key }));
    try {
      await agent.start();
      await waitUntil("connected", () => agent.connectedServers().length === 1);
      server.dropSessions();
      await waitUntil("reconnected", () => server.resumed.length === 2 && agent.connectedServers().length === 1);
      assert.deepEqual(server.resumed, [false, true], "the reconnect resumed the first session");
      // The same certificate, re-written (a Secret update): reloaded, its sessions dropped.
      appendFileSync(cert, "\n");
      server.dropSessions();
      await waitUntil("reconnected again", () => server.resumed.length === 3 && agent.connectedServers().length === 1);
      assert.deepEqual(server.resumed, [false, true, false], "after the reload: a full handshake");
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("detects a server that stops answering with keepalive pings", async () => {
    const server = await listeningServer({ serverID: "ka-1", serverCount: 1 });
    const lb = new TcpBalancer(() => [server.port]);
    await lb.listen();
    const agent = new ProxyAgent(options(lb.port, { keepaliveTime: 100, keepaliveTimeout: 300 }));
    try {
      await agent.start();
      await waitUntil("connected", () => agent.connectedServers().length === 1, { timeoutMs: 2000 });
      lb.freeze();
      const frozenAt = Date.now();
      await waitUntil("dead server detected", () => agent.connectedServers().length === 0, { timeoutMs: 2000 });
      assert.ok(Date.now() - frozenAt < 1500);
    } finally {
      await agent.close();
      await lb.close();
      await server.close();
    }
  });
});

describe("ProxyAgent refuses bad configuration: its options before it is made, its files at start()", () => {
  // `over` is a function: the PKI paths exist only once `before` has run.
  const cases: { name: string; over: () => Partial<AgentOptionsInput>; flag: string; code: string }[] = [
    {
      name: "an unreadable CA file",
      over: () => ({ caCert: "/nonexistent/ca.crt" }),
      flag: "--ca-cert",
      code: "CP_ERR_TLS_FILE",
    },
    {
      name: "a key that is not a key",
      over: () => ({ agentKey: pki.paths.ca.cert }),
      flag: "--agent-key",
      code: "CP_ERR_TLS_FILE",
    },
    {
      name: "an unknown identifier type",
      over: () => ({ agentIdentifiers: "zone=eu" }),
      flag: "--agent-identifiers",
      code: "CP_ERR_CONFIG",
    },
  ];
  for (const { name, over, flag, code } of cases) {
    it(`names ${flag} for ${name}`, async () => {
      const run = async (): Promise<void> => {
        const agent = new ProxyAgent(validateAgentOptions(input(1, over())));
        try {
          await agent.start();
        } finally {
          await agent.close();
        }
      };
      await assert.rejects(
        run(),
        (err: Error) =>
          (err instanceof ConfigError || err instanceof TlsFileError) &&
          err.code === code &&
          err.message.startsWith(`${flag}:`),
      );
    });
  }
});

describe("ProxyAgent is one component: start, drain and close each once", () => {
  /** Let pending promise reactions and I/O callbacks run. */
  const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

  /** An agent on a ManualClock, connected to a fake server, with one endpoint connection open. */
  async function withOpenConnection(
    serverID: string,
    body: (t: { agent: ProxyAgent; clock: ManualClock; stream: FakeAgentStream; id: bigint }) => Promise<void>,
  ): Promise<void> {
    const clock = new ManualClock();
    const server = await listeningServer({ serverID, serverCount: 1 });
    const agent = new ProxyAgent(options(server.port, { drainGracePeriod: 30_000 }), { clock });
    try {
      await agent.start();
      clock.advance(0); // the connect loop's first attempt
      const stream = await server.stream(0);
      await waitUntil("connected", () => agent.connectedServers().length === 1, { timeoutMs: 10_000 });
      const id = await dial(stream, `127.0.0.1:${echo.port}`, 1n);
      assert.equal(agent.openEndpointConnections, 1);
      await body({ agent, clock, stream, id });
    } finally {
      await agent.close();
      await server.close();
    }
  }

  it("a second start() is the first one; a start() after close() rejects and opens nothing", async () => {
    const server = await listeningServer({ serverID: "once-1", serverCount: 1 });
    const agent = new ProxyAgent(options(server.port));
    try {
      const first = agent.start();
      assert.equal(agent.start(), first);
      await first;
      await server.stream(0);
      assert.equal(agent.start(), first);
    } finally {
      await agent.close();
      await server.close();
    }
    const closed = new ProxyAgent(options(1, { healthServerPort: await freePort() }));
    await closed.close();
    await assert.rejects(closed.start(), /proxy-agent is closed/);
    assert.equal(closed.addresses().health, undefined);
    assert.equal(await closed.drain(), false, "a drain after close has nothing to wait for");
  });

  it("drain() sends DRAIN once and waits, on the agent's clock, until the open connection ends; a second drain() is the first one", async () => {
    await withOpenConnection("drain-1", async ({ agent, clock, stream, id }) => {
      const drained = agent.drain();
      assert.equal(agent.drain(), drained);
      await stream.next(isType(PacketType.DRAIN));
      let result: boolean | undefined;
      void drained.then((idle) => (result = idle));
      clock.advance(29_999);
      await settle();
      assert.equal(result, undefined, "still waiting for the open connection");
      // the connection keeps working while the agent drains
      stream.send({ type: PacketType.DATA, data: { connectID: id, error: "", data: Buffer.from("ping") } });
      assert.equal(Buffer.concat(await receiveData(stream, id, 4)).toString(), "ping");
      // its client ends it: the drain is over
      stream.send({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: id } });
      await stream.next(isType(PacketType.CLOSE_RSP));
      assert.equal(await drained, true);
      assert.equal(stream.packets.filter(isType(PacketType.DRAIN)).length, 0, "one DRAIN");
      assert.equal(clock.armed, 0, "no grace timer left, no connect attempt scheduled");
    });
  });

  it("drain() resolves false once --drain-grace-period is over, the connection still open", async () => {
    await withOpenConnection("drain-2", async ({ agent, clock }) => {
      const drained = agent.drain();
      clock.advance(30_000);
      assert.equal(await drained, false);
      assert.equal(agent.openEndpointConnections, 1, "close() cuts it, not the drain");
    });
  });

  it("close() during a drain cuts it: the drain resolves false", async () => {
    await withOpenConnection("drain-3", async ({ agent, clock, stream, id }) => {
      const drained = agent.drain();
      await stream.next(isType(PacketType.DRAIN));
      await agent.close();
      assert.equal(await drained, false);
      assert.equal(agent.openEndpointConnections, 0);
      assert.equal(clock.armed, 0, "the grace timer is gone");
      const rsp = await stream.next((p) => "closeResponse" in p && p.closeResponse.connectID === id);
      assert.ok("closeResponse" in rsp);
      assert.equal(rsp.closeResponse.error, "agent shutting down");
    });
  });

  it("the constructor reads no file: files that do not exist fail start(), naming the flag", async () => {
    const missing = join(pki.dir, "missing");
    const agent = new ProxyAgent(
      options(1, {
        caCert: join(missing, "ca.crt"),
        agentCert: join(missing, "tls.crt"),
        agentKey: join(missing, "tls.key"),
        serviceAccountTokenPath: join(missing, "token"),
        destinationPolicy: join(missing, "policy.json"),
        gatewayCaFile: join(missing, "gateway-ca.crt"),
      }),
    );
    assert.equal(agent.agentID, "agent-1");
    await assert.rejects(
      agent.start(),
      (err: Error) =>
        err instanceof TlsFileError &&
        err.code === "CP_ERR_TLS_FILE" &&
        err.flag === "--agent-cert" &&
        err.message.startsWith(`--agent-cert: ${join(missing, "tls.crt")}: cannot read`),
    );
    await agent.close();
  });
});

describe("ProxyAgent backpressure", () => {
  it("pauses endpoint reads while the server stream is full, and the server stream while an endpoint is slow", async () => {
    const server = await listeningServer({ serverID: "bp-1", serverCount: 1 });
    const endpointSockets: net.Socket[] = [];
    const agent = new ProxyAgent(options(server.port), {
      connectEndpoint: (o) => {
        const s = net.connect(o);
        endpointSockets.push(s);
        return s;
      },
    });
    const TOTAL = 32 * 1024 * 1024;
    let sourceWritten = 0;
    const sinkSockets: net.Socket[] = [];
    let sinkReceived = 0;
    let targetConnections = 0;
    const target = net.createServer((s) => {
      s.on("error", () => undefined);
      sinkSockets.push(s);
      if (targetConnections++ === 0) {
        // first connection: a source that writes TOTAL bytes as fast as it is allowed
        const chunk = Buffer.alloc(64 * 1024, 1);
        const pump = (): void => {
          while (sourceWritten < TOTAL) {
            sourceWritten += chunk.length;
            if (!s.write(chunk)) return void s.once("drain", pump);
          }
        };
        pump();
        return;
      }
      // second connection: a sink that does not read until told to
      s.pause();
      s.on("data", (d: Buffer) => void (sinkReceived += d.length));
    });
    target.listen(0, "127.0.0.1");
    await once(target, "listening");
    const targetPort = (target.address() as net.AddressInfo).port;
    try {
      await agent.start();
      const stream = await server.stream(0);

      // endpoint -> server: the fake server stops reading; the agent must pause the endpoint
      const src = await dial(stream, `127.0.0.1:${targetPort}`, 1n);
      stream.call.pause();
      await waitUntil("endpoint socket paused", () => endpointSockets[0]?.isPaused() === true, { timeoutMs: 5000 });
      assert.ok(sourceWritten < TOTAL, "the source is held back");
      stream.call.resume();
      const got = await receiveData(stream, src, TOTAL);
      assert.equal(
        got.reduce((n, c) => n + c.length, 0),
        TOTAL,
      );

      // server -> endpoint: the endpoint does not read; the agent pauses the server stream
      const sink = await dial(stream, `127.0.0.1:${targetPort}`, 2n);
      await waitUntil("sink connected", () => sinkSockets.length === 2, { timeoutMs: 2000 });
      const payload = Buffer.alloc(64 * 1024, 2);
      const SEND = 48 * 1024 * 1024;
      for (let sent = 0; sent < SEND; sent += payload.length) {
        stream.send({ type: PacketType.DATA, data: { connectID: sink, error: "", data: payload } });
      }
      const agentSide = endpointSockets[1]!;
      await waitUntil("endpoint write buffer over budget", () => agentSide.writableLength > 4 * 1024 * 1024, {
        timeoutMs: 5000,
      });
      // the agent stopped reading the server stream: its data waits at the fake server
      await waitUntil("server stream backed up", () => stream.call.bufferedBytes > 0, { timeoutMs: 5000 });
      assert.ok(agentSide.writableLength < 16 * 1024 * 1024, `endpoint buffer bounded: ${agentSide.writableLength}`);
      sinkSockets[1]!.resume();
      await waitUntil("all data delivered to the sink", () => sinkReceived === SEND, { timeoutMs: 20_000 });
    } finally {
      await agent.close();
      await server.close();
      for (const s of sinkSockets) s.destroy();
      await new Promise<void>((resolve) => target.close(() => resolve()));
    }
  });
});

describe("--alpn-proto", () => {
  it("offers the extra protocols before h2 when connecting to the server", async () => {
    const offered: string[][] = [];
    const server = tls.createServer({
      cert: pki.serverCert,
      key: pki.serverKey,
      ALPNCallback: ({ protocols }) => {
        offered.push(protocols);
        return "h2";
      },
    });
    server.on("secureConnection", (s) => s.destroy());
    server.on("tlsClientError", () => undefined);
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const agent = new ProxyAgent(options((server.address() as net.AddressInfo).port, { alpnProto: ["konnectivity"] }), {
      logger: silentLogger,
    });
    try {
      await agent.start();
      await waitUntil("a TLS handshake with the agent", () => offered.length > 0, { timeoutMs: 5000 });
      assert.deepEqual(offered[0], ["konnectivity", "h2"]);
    } finally {
      await agent.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
