/**
 * The bounds on what a stream queues for a peer that does not read (SendLimits): a peer that
 * sends requests and never reads the control replies is cut once they pass the bound, with
 * RESOURCE_EXHAUSTED and a reset, and other clients go on; a peer that reads is
 * never cut however many replies it gets.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { waitUntil } from "../testing/index.js";
import { openCall, type ClientCall } from "./client.js";
import { frameMessage } from "./framing.js";
import { serveGrpc, type ServerCall } from "./server.js";
import { TUNNEL_HTTP2_OPTIONS } from "./session.js";
import { GrpcStatus, type StreamStatus } from "./status.js";

const CONTROL_LIMIT = 256 * 1024;

/** A server that answers every message with a 64-byte control reply, bounded at CONTROL_LIMIT. */
async function replyServer(): Promise<{ port: number; calls: ServerCall[]; close: () => void }> {
  const calls: ServerCall[] = [];
  const server = http2.createServer(TUNNEL_HTTP2_OPTIONS);
  const reply = frameMessage(Buffer.alloc(59, 1));
  serveGrpc(server, {
    "/Test/Reply": (call) => {
      calls.push(call);
      call.limitSends({ controlBytes: CONTROL_LIMIT });
      call.sendHeaders();
      call.on("message", () => call.sendControl(reply));
    },
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { port: (server.address() as AddressInfo).port, calls, close: () => server.close() };
}

/** Send `n` small requests, yielding to the event loop (where replies are read) every 100; stops early when the call ends. */
async function flood(call: ClientCall, n: number): Promise<void> {
  const request = frameMessage(Buffer.alloc(8, 2));
  for (let i = 0; i < n && !call.closed; i++) {
    if (!call.send(request)) await Promise.race([once(call, "drain"), once(call, "close")]);
    if (i % 100 === 99) await new Promise((resolve) => setImmediate(resolve));
  }
}

test("a peer that never reads its replies is cut at the bound; other clients go on", async () => {
  const srv = await replyServer();
  const session = http2.connect(`http://127.0.0.1:${srv.port}`);
  // Another client (its own session: the deaf one's connection window stays spent on what it
  // never read, a client-side matter).
  const other = http2.connect(`http://127.0.0.1:${srv.port}`);
  try {
    const deaf = openCall(session, "/Test/Reply");
    await deaf.waitForHeaders();
    deaf.pause(); // never reads: its window closes and replies queue at the server
    const ended = once(deaf, "close") as Promise<[StreamStatus]>;
    await flood(deaf, 200_000);
    await waitUntil("the server cut the deaf stream", () => srv.calls[0]?.closed === true, { timeoutMs: 20_000 });
    const [status] = await ended;
    assert.notEqual(status.code, GrpcStatus.OK, "the client sees its stream reset");
    assert.ok(srv.calls[0]!.controlBytesQueued <= CONTROL_LIMIT + 64, "nothing queued past the bound");

    const reader = openCall(other, "/Test/Reply");
    await reader.waitForHeaders();
    let replies = 0;
    reader.on("message", () => replies++);
    await flood(reader, 10_000);
    await waitUntil("every reply read", () => replies === 10_000, { timeoutMs: 20_000 });
    assert.equal(reader.closed, false, "a reading peer is not cut by 10,000 replies (640 KB, over the bound)");
    reader.abort({ code: GrpcStatus.CANCELLED, details: "done" });
  } finally {
    session.destroy();
    other.destroy();
    srv.close();
  }
});

test("a send past the queued-bytes bound cuts the stream with RESOURCE_EXHAUSTED", async () => {
  const server = http2.createServer(TUNNEL_HTTP2_OPTIONS);
  let status: StreamStatus | undefined;
  serveGrpc(server, {
    "/Test/Push": (call) => {
      call.limitSends({ queuedBytes: 1024 * 1024 });
      call.on("close", (s) => (status = s));
      const chunk = frameMessage(Buffer.alloc(64 * 1024, 3));
      for (let i = 0; i < 64 && !call.closed; i++) call.send(chunk);
    },
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  try {
    const call = openCall(session, "/Test/Push");
    call.pause();
    await waitUntil("the server cut the stream", () => status !== undefined, { timeoutMs: 20_000 });
    assert.equal(status?.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.match(status?.details ?? "", /^the peer does not read: \d+ bytes queued \(limit 1048576\)$/);
  } finally {
    session.destroy();
    server.close();
  }
});
