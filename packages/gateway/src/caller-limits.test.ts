/**
 * Hostile callers at the gateway's port: a client that never finishes its TLS handshake, one that
 * never finishes its HTTP/1.1 headers, a flood of idle connections, one client holding more
 * connections than its share, idle HTTP/2 connections, and a rapid-reset flood. Each is cut or
 * refused by its limit (shortened here) while a legitimate caller keeps working.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as https from "node:https";
import * as net from "node:net";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { h2From, startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";
import { RawH2 } from "./testing/raw-h2.js";

const TOKEN = "limits-token";
const USER = "system:serviceaccount:default:limits";
const bearer = { authorization: `Bearer ${TOKEN}` };

/** Resolves with the milliseconds until `socket` closes (it must close within `withinMs`). */
async function closesWithin(socket: net.Socket, withinMs: number): Promise<number> {
  const start = Date.now();
  const timer = setTimeout(() => socket.destroy(new Error(`still open after ${withinMs} ms`)), withinMs);
  socket.on("error", () => undefined);
  socket.resume();
  await once(socket, "close");
  clearTimeout(timer);
  const took = Date.now() - start;
  assert.ok(took < withinMs, `closed by the gateway, not by the test (${took} ms)`);
  return took;
}

describe("gateway caller limits", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({
      options: { clientCaFile: "" },
      limits: { handshakeTimeoutMs: 400, headersTimeoutMs: 600, maxConnections: 4 },
    });
    f.hub.tokens.set(TOKEN, { username: USER, groups: [], extra: {} });
    f.hub.grantProxy(USER, "mc1", "get");
  });
  after(() => f.close());

  test("a client that never finishes its TLS handshake is cut; others are served meanwhile", async () => {
    const stalled = net.connect(f.port, "127.0.0.1");
    await once(stalled, "connect");
    stalled.write(Buffer.from([0x16, 0x03, 0x01])); // the start of a ClientHello, and nothing more
    const closed = closesWithin(stalled, 20_000);
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    await closed;
  });

  test("plain HTTP to the TLS port gets a 400 naming --port within 1 s; a client that sends nothing is cut", async () => {
    const started = Date.now();
    const plain = net.connect(f.port, "127.0.0.1");
    let answer = "";
    plain.on("data", (d: Buffer) => (answer += d.toString()));
    plain.write("GET /mc1/api HTTP/1.1\r\nHost: localhost\r\n\r\n");
    await closesWithin(plain, 1000);
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request/, `after ${Date.now() - started} ms: ${answer}`);
    assert.match(answer, /Client sent an HTTP request to an HTTPS server: this port \(--port\) speaks TLS/);
    const silent = net.connect(f.port, "127.0.0.1");
    await once(silent, "connect");
    const closed = closesWithin(silent, 20_000);
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    await closed;
  });

  test("an HTTP/1.1 request whose headers never end is cut; others are served meanwhile", async () => {
    const slow = await f.tlsConnect();
    slow.write("GET /mc1/api HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1\r\n");
    const closed = closesWithin(slow, 20_000);
    assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
    await closed;
  });

  test("connections beyond the cap are closed on arrival; freeing one lets a caller in", async () => {
    const idle = await Promise.all([f.tlsConnect(), f.tlsConnect(), f.tlsConnect(), f.tlsConnect()]);
    const extra = net.connect(f.port, "127.0.0.1");
    await closesWithin(extra, 20_000);
    for (const s of idle) s.destroy();
    // The server counts a connection as gone once it saw it close; the next request gets in.
    await waitUntil(
      "a request to get in once the idle connections are gone",
      async () => (await f.request("/mc1/api", { headers: bearer })).status === 200,
      { timeoutMs: 10_000, everyMs: 50 },
    );
  });
});

/** An HTTPS GET of `path` from `localAddress`; resolves with the status (0: refused or cut). */
function getFrom(f: GatewayFixture, localAddress: string, path: string): Promise<number> {
  return new Promise((resolve) => {
    const req = https.request(
      { host: "127.0.0.1", port: f.port, path, ca: f.servingCa, agent: false, localAddress, headers: bearer },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", () => resolve(0));
    req.end();
  });
}

/** A TLS connection (HTTP/1.1 by ALPN) from `localAddress`, once its handshake is done. */
async function tlsFrom(f: GatewayFixture, localAddress: string): Promise<tls.TLSSocket> {
  const socket = tls.connect({
    socket: net.connect({ host: "127.0.0.1", port: f.port, localAddress }),
    ca: f.servingCa,
    servername: "localhost",
    ALPNProtocols: ["http/1.1"],
  });
  await once(socket, "secureConnect");
  return socket;
}

describe("gateway caller limits: per client, HTTP/2", () => {
  const IDLE_MS = 300;
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({
      options: { clientCaFile: "" },
      limits: { maxConnectionsPerClient: 3, idleTimeoutMs: IDLE_MS, maxConcurrentStreams: 4, maxEarlyResets: 20 },
    });
    f.hub.tokens.set(TOKEN, { username: USER, groups: [], extra: {} });
    f.hub.grantProxy(USER, "mc1", "get");
  });
  after(() => f.close());

  test("a client over its connection cap is closed on arrival while another client is served", async () => {
    // Each test of this suite connects from addresses of its own (127.0.0.0/8 is all loopback).
    const held = await Promise.all([tlsFrom(f, "127.0.0.3"), tlsFrom(f, "127.0.0.3"), tlsFrom(f, "127.0.0.3")]);
    const extra = net.connect({ port: f.port, host: "127.0.0.1", localAddress: "127.0.0.3" });
    await closesWithin(extra, 20_000);
    assert.equal(await getFrom(f, "127.0.0.3", "/mc1/api"), 0);
    assert.equal(await getFrom(f, "127.0.0.4", "/mc1/api"), 200);
    const metrics = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
    assert.match(metrics, /cluster_proxy_gateway_refused_connections_total\{reason="client-connection-cap"\} [1-9]/);
    held[0].destroy();
    await waitUntil(
      "the capped client to get in once one of its connections is gone",
      async () => (await getFrom(f, "127.0.0.3", "/mc1/api")) === 200,
      { timeoutMs: 10_000, everyMs: 50 },
    );
    for (const s of held) s.destroy();
  });

  test("an idle HTTP/2 connection is closed after the idle timeout; one with an open watch is not", async () => {
    const active = h2From(f, "127.0.0.5");
    const watch = active.request({ ":path": "/mc1/quiet?watch=1", ...bearer });
    const [head] = (await once(watch, "response")) as [http2.IncomingHttpHeaders];
    assert.equal(head[":status"], 200);
    let activeClosed = false;
    active.once("close", () => (activeClosed = true));
    // A client that answered one request and went quiet, and one that never asks anything (and
    // does not close when told to go away).
    const used = h2From(f, "127.0.0.6");
    const r = used.request({ ":path": "/mc1/api", ...bearer });
    r.resume();
    await once(r, "end");
    const silent = await RawH2.connect(f.port, f.servingCa, "127.0.0.6");
    await Promise.all([once(used, "close"), silentCloses(silent)]);
    // Another idle time, measured by a second silent client: the watch's connection outlives it.
    await silentCloses(await RawH2.connect(f.port, f.servingCa, "127.0.0.6"));
    assert.equal(activeClosed, false, "the connection of a running watch was closed");
    f.endpoint.release();
    watch.resume();
    await once(watch, "end");
    active.close();
  });

  test("an HTTP/1.1 connection that never asks is closed after the idle time, one idle after its answer after the keep-alive time; one with a quiet watch is not", async () => {
    const watching = await tlsFrom(f, "127.0.0.10");
    watching.write(`GET /mc1/quiet?watch=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
    let got = "";
    watching.on("data", (c: Buffer) => (got += c.toString()));
    await waitUntil("the watch's head", () => Promise.resolve(got.includes("\r\n\r\n")), {
      timeoutMs: 10_000,
      everyMs: 10,
    });
    let watchClosed = false;
    watching.once("close", () => (watchClosed = true));
    const silent = await tlsFrom(f, "127.0.0.11");
    const answered = await tlsFrom(f, "127.0.0.11");
    answered.write(`GET /mc1/api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
    await Promise.all([closesWithin(silent, 20_000), closesWithin(answered, 20_000)]);
    // Another idle time, measured by a second silent client: the watch's connection outlives it.
    await closesWithin(await tlsFrom(f, "127.0.0.11"), 20_000);
    assert.equal(watchClosed, false, "the connection of a running watch was closed");
    f.endpoint.release();
    await waitUntil("the watch's end", () => Promise.resolve(got.endsWith("0\r\n\r\n")), {
      timeoutMs: 10_000,
      everyMs: 10,
    });
    watching.destroy();
  });

  test("HTTP/2 clients are told the stream limit", async () => {
    const session = h2From(f, "127.0.0.7");
    await once(session, "remoteSettings");
    assert.equal(session.remoteSettings.maxConcurrentStreams, 4);
    session.close();
  });

  // Each RST_STREAM code a client may send, NO_ERROR included (node reports that stream as closed
  // normally; nghttp2's own guard, which once caught it, is lifted on this port).
  const floods = [
    { code: http2.constants.NGHTTP2_CANCEL, name: "CANCEL", from: "127.0.0.8", other: "127.0.0.9" },
    { code: http2.constants.NGHTTP2_NO_ERROR, name: "NO_ERROR", from: "127.0.0.14", other: "127.0.0.15" },
  ];
  for (const [i, { code, name, from, other: otherFrom }] of floods.entries()) {
    test(`a rapid-reset flood (RST_STREAM ${name}) is cut early (ENHANCE_YOUR_CALM) while another caller is served`, async () => {
      const flooder = `flooder-${name}`;
      f.hub.tokens.set(`flood-token-${name}`, { username: flooder, groups: [], extra: {} });
      f.hub.grantProxy(flooder, "mc1", "get");
      const flood = await RawH2.connect(f.port, f.servingCa, from);
      const other = h2From(f, otherFrom);
      const flooding = flood.rapidReset(20_000, "/mc1/api", { authorization: `Bearer flood-token-${name}` }, 10, code);
      const answer = other.request({ ":path": "/mc1/api", ...bearer });
      answer.resume();
      const [head] = (await once(answer, "response")) as [http2.IncomingHttpHeaders];
      assert.equal(head[":status"], 200);
      const sent = await flooding;
      await flood.closed();
      assert.ok(
        flood.goaways.includes(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM),
        `GOAWAY codes: ${flood.goaways.join(", ")}`,
      );
      const admitted = f.audit.filter((a) => a.user === flooder).length;
      assert.ok(sent < 1_000, `the flood sent ${sent} streams before it was cut`);
      assert.ok(admitted < 200, `${admitted} of the flood's streams were admitted`);
      const again = other.request({ ":path": "/mc1/api", ...bearer });
      again.resume();
      assert.equal(((await once(again, "response")) as [http2.IncomingHttpHeaders])[0][":status"], 200);
      other.close();
      const metrics = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
      assert.match(
        metrics,
        new RegExp(`cluster_proxy_gateway_refused_connections_total\\{reason="stream-resets"\\} ${i + 1}\n`),
      );
    });
  }
});

describe("gateway caller limits: a client that goes away", () => {
  test("many streams waiting for their answers when the client's connection drops are not a rapid reset", async () => {
    const f = await startGatewayFixture({ options: { clientCaFile: "" }, limits: { maxEarlyResets: 5 } });
    try {
      f.hub.tokens.set(TOKEN, { username: USER, groups: [], extra: {} });
      f.hub.grantProxy(USER, "mc1", "get");
      const raw = await RawH2.connect(f.port, f.servingCa);
      raw.open(20, "/mc1/hold", bearer);
      await f.endpoint.heldCount(20);
      raw.socket.destroy();
      await raw.closed();
      f.endpoint.release();
      assert.equal((await f.request("/mc1/api", { headers: bearer })).status, 200);
      const metrics = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
      assert.doesNotMatch(metrics, /reason="stream-resets"/);
    } finally {
      await f.close();
    }
  });
});

/** Resolves when the gateway closes `raw` (within 20 s, or the test fails). */
async function silentCloses(raw: RawH2): Promise<void> {
  const timer = setTimeout(() => raw.destroy(), 20_000);
  await raw.closed();
  clearTimeout(timer);
  assert.ok(raw.goaways.length > 0, "closed by the gateway (GOAWAY), not by the test");
}
