/**
 * The pool's deadlines on endpoint sessions: an endpoint that completes its TLS handshake but never
 * sends its HTTP/2 SETTINGS is given up when the pool's clock (a ManualClock here) passes the
 * SETTINGS deadline, not before; a quiet session is pinged end to end and one whose path went
 * silent is destroyed; streams that outlive the endpoint's GOAWAY are ended after a grace.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as tls from "node:tls";
import { test } from "node:test";
import { agentClusterUri, createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { realClock } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import {
  ClusterSessions,
  ENDPOINT_LIVENESS,
  SETTINGS_TIMEOUT_MS,
  type EndpointLiveness,
  type EndpointTls,
} from "./cluster-pool.js";

/**
 * Certificates for one endpoint session: the endpoint's server options (mc1's agent certificate,
 * trusting the gateway CA) and the gateway's material (its identity, trusting the agent CA).
 */
async function endpointPki(): Promise<{ endpoint: { cert: string; key: string; ca: string }; gateway: EndpointTls }> {
  const gatewayCa = await createCertificateAuthority({ commonName: "gateway-ca", validityDays: 1 });
  const agentCa = await createCertificateAuthority({ commonName: "agent-ca", validityDays: 1 });
  const agent = await issueCertificate(agentCa, {
    commonName: "agent",
    uris: [agentClusterUri("mc1")],
    usage: "both",
    validityDays: 1,
  });
  const identity = await issueCertificate(gatewayCa, { commonName: "gateway", usage: "client", validityDays: 1 });
  return {
    endpoint: { cert: agent.certPem, key: agent.keyPem, ca: gatewayCa.certPem },
    gateway: {
      cert: Buffer.from(identity.certPem),
      key: Buffer.from(identity.keyPem),
      ca: Buffer.from(agentCa.certPem),
    },
  };
}

function tcpDialer(port: number): () => Promise<net.Socket> {
  return () => {
    const socket = net.connect(port, "127.0.0.1");
    return once(socket, "connect").then(() => socket);
  };
}

test("a session whose endpoint sends no SETTINGS ends at the deadline of the injected clock", async () => {
  const { endpoint, gateway } = await endpointPki();
  // Speaks TLS (ALPN h2), then says nothing.
  const held: tls.TLSSocket[] = [];
  const mute = tls.createServer(
    {
      ...endpoint,
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ["h2"],
    },
    (socket) => {
      held.push(socket);
      socket.on("error", () => undefined);
    },
  );
  mute.listen(0, "127.0.0.1");
  await once(mute, "listening");
  const port = (mute.address() as net.AddressInfo).port;
  const clock = new ManualClock();
  const sessions = new ClusterSessions("mc1", tcpDialer(port), gateway, 1, clock);
  try {
    const stream = await sessions.request({ ":method": "GET", ":path": "/" }, true);
    const errors: Error[] = [];
    stream.on("error", (err: Error) => errors.push(err));
    const closed = new Promise<void>((resolve) => stream.once("close", resolve));
    assert.equal(clock.armed, 1, "the SETTINGS deadline is armed on the injected clock");
    clock.advance(SETTINGS_TIMEOUT_MS - 1);
    await new Promise((r) => setImmediate(r));
    assert.equal(stream.closed, false, "not before the deadline");
    assert.equal(sessions.sessionCount, 1);
    clock.advance(1);
    await closed;
    assert.match(errors[0]?.message ?? "", /sent no HTTP\/2 SETTINGS within 10000 ms/);
    for (let i = 0; i < 20 && sessions.sessionCount > 0; i++) await new Promise((r) => setImmediate(r));
    assert.equal(sessions.sessionCount, 0, "the session is given up");
    assert.equal(clock.armed, 0);
  } finally {
    sessions.destroy();
    for (const s of held) s.destroy();
    mute.close();
  }
});

/** An endpoint (mutual TLS, HTTP/2) whose every stream answers "first" and then holds, like a quiet watch. */
async function holdingEndpoint(): Promise<{
  port: number;
  tls: EndpointTls;
  sessions: http2.ServerHttp2Session[];
  close: () => void;
}> {
  const { endpoint, gateway } = await endpointPki();
  const server = http2.createSecureServer({
    ...endpoint,
    requestCert: true,
    rejectUnauthorized: true,
  });
  const sessions: http2.ServerHttp2Session[] = [];
  server.on("session", (s) => {
    sessions.push(s);
    s.on("error", () => undefined);
  });
  server.on("stream", (stream) => {
    stream.on("error", () => undefined);
    stream.respond({ ":status": 200 });
    stream.write("first\n");
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    port: (server.address() as net.AddressInfo).port,
    tls: gateway,
    sessions,
    close: () => {
      for (const s of sessions) s.destroy();
      server.close();
    },
  };
}

/**
 * A TCP relay to `port` whose `freeze()` stops every byte both ways without closing anything: a
 * hop that left without its close reaching anyone.
 */
async function freezableRelay(port: number): Promise<{ port: number; freeze: () => void; close: () => void }> {
  const pairs: [net.Socket, net.Socket][] = [];
  const relay = net.createServer((client) => {
    const upstream = net.connect(port, "127.0.0.1");
    client.on("error", () => undefined);
    upstream.on("error", () => undefined);
    client.pipe(upstream);
    upstream.pipe(client);
    pairs.push([client, upstream]);
  });
  relay.listen(0, "127.0.0.1");
  await once(relay, "listening");
  return {
    port: (relay.address() as net.AddressInfo).port,
    freeze: () => {
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    close: () => {
      for (const pair of pairs) for (const s of pair) s.destroy();
      relay.close();
    },
  };
}

/** Resolves with the text a stream has sent once it includes `want`. */
async function readUntil(stream: http2.ClientHttp2Stream, want: string): Promise<void> {
  let text = "";
  stream.on("data", (c: Buffer) => (text += c.toString()));
  while (!text.includes(want)) await once(stream, "data");
}

test("a quiet session is pinged through the path: kept while the endpoint answers, destroyed (its stream failing) once the path goes silent", async () => {
  const endpoint = await holdingEndpoint();
  const relay = await freezableRelay(endpoint.port);
  const liveness: EndpointLiveness = { idleMs: 100, maxIdleMs: 100, timeoutMs: 1_000, goawayGraceMs: 60_000 };
  const sessions = new ClusterSessions("mc1", tcpDialer(relay.port), endpoint.tls, 1, realClock, liveness);
  try {
    const stream = await sessions.request({ ":method": "GET", ":path": "/watch" }, true);
    stream.on("error", () => undefined);
    await readUntil(stream, "first");
    const closed = new Promise<number>((resolve) => stream.once("close", () => resolve(performance.now())));
    // Healthy and quiet for many probe periods: every ping is answered, the stream stays.
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(stream.closed, false, "a quiet stream on a live path is kept");
    const frozen = performance.now();
    relay.freeze();
    const endedAt = await Promise.race([
      closed,
      new Promise<number>((_, reject) => setTimeout(() => reject(new Error("still open 20 s after")), 20_000)),
    ]);
    // The quiet period, the ping's deadline and scheduling: within seconds, never at once.
    assert.ok(endedAt - frozen >= liveness.timeoutMs - 50, `ended ${(endedAt - frozen).toFixed(0)} ms after`);
    assert.equal(stream.rstCode !== undefined || stream.destroyed, true);
  } finally {
    sessions.destroy();
    relay.close();
    endpoint.close();
  }
});

test("after the endpoint's GOAWAY, a stream still running is ended at the grace of the injected clock, not before", async () => {
  const endpoint = await holdingEndpoint();
  const clock = new ManualClock();
  const liveness: EndpointLiveness = { ...ENDPOINT_LIVENESS, idleMs: 60_000, maxIdleMs: 60_000 };
  const sessions = new ClusterSessions("mc1", tcpDialer(endpoint.port), endpoint.tls, 1, clock, liveness);
  try {
    const stream = await sessions.request({ ":method": "GET", ":path": "/watch" }, true);
    const errors: Error[] = [];
    stream.on("error", (err: Error) => errors.push(err));
    await readUntil(stream, "first");
    const client = stream.session;
    assert.ok(client);
    const goaway = once(client, "goaway");
    // The agent drains: GOAWAY, and its running stream goes on.
    for (const s of endpoint.sessions) s.close();
    await goaway;
    for (let i = 0; i < 20 && clock.armed < 2; i++) await new Promise((r) => setImmediate(r));
    clock.advance(liveness.goawayGraceMs - 1);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(stream.closed, false, "not before the grace");
    const closed = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("still open 10 s after the grace")), 10_000);
      stream.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
    });
    clock.advance(1);
    await closed;
    assert.match(errors[0]?.message ?? "", /outlived its GOAWAY by 35000 ms/);
    assert.equal(sessions.sessionCount, 0);
  } finally {
    sessions.destroy();
    endpoint.close();
  }
});
