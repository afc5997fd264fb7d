/**
 * Hostile callers at the gateway's port: a client that never finishes its TLS handshake, one that
 * never finishes its HTTP/1.1 headers, and a flood of idle connections. Each is cut or refused by
 * its limit (shortened here) while a legitimate caller keeps working.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { after, before, describe, test } from "node:test";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

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
