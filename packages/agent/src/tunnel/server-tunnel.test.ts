/**
 * Per-connection flow control at the agent (docs/design/flow-control.md): an endpoint that does not
 * read makes the tunnel send FLOW_PAUSE for that connection, never pause the shared server
 * stream (while the server honours FLOW_PAUSE), and close the connection with the stall error
 * after the stall timeout; FLOW_PAUSE from the server pauses that endpoint socket only.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { FlowControl, encodeData, encodeFlowControl } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import { PacketType } from "@cluster-proxy/protocol";
import type { ServerTunnel } from "./server-tunnel.js";
import * as net from "node:net";
import { FakeServerCall, dialAddress, dialThrough, tunnelOver } from "../testing/fake-server-call.js";
import { deafEndpoint, listenTcp } from "../testing/tcp-endpoints.js";
import { waitUntil } from "@cluster-proxy/tunnel/testing";

function tunnel(stallMs: number, serverFlowControl = true): { t: ServerTunnel; call: FakeServerCall } {
  const call = new FakeServerCall();
  const t = tunnelOver(call, {
    connectionStallTimeoutMs: stallMs,
    serverFlowControl,
    endpointWriteBudget: 256 * 1024,
    endpointWriteLimit: 1024 * 1024 * 1024,
  });
  return { t, call };
}

describe("ServerTunnel per-connection flow control", () => {
  const cleanups: (() => void)[] = [];
  after(() => cleanups.forEach((c) => c()));

  test("a deaf endpoint: FLOW_PAUSE, the stream is not paused, then CLOSE_RSP with the stall error", async () => {
    const ep = await deafEndpoint();
    cleanups.push(() => void ep.close());
    const { t, call } = tunnel(300);
    cleanups.push(() => t.close("test over"));
    const id = await dialThrough(t, call, ep.port, 1n);
    const chunk = Buffer.alloc(64 * 1024, 7);
    // Enough to fill the kernel buffers and pass the 256 KiB budget.
    for (let i = 0; i < 400 && call.flows().length === 0; i++) {
      t.receive(sealFrame(encodeData(id, chunk, FRAME_HEADER)));
      if (i % 16 === 15) await new Promise((r) => setTimeout(r, 5));
    }
    assert.deepEqual(call.flows(), [{ type: FlowControl.PAUSE, connectID: id }]);
    assert.equal(call.pauses, 0, "the shared stream is never paused for one endpoint");
    await waitUntil(
      "the stall close",
      () => call.packets().some((p) => "closeResponse" in p && p.closeResponse.connectID === id),
      { timeoutMs: 10_000 },
    );
    const rsp = call.packets().find((p) => "closeResponse" in p);
    assert.ok(rsp && "closeResponse" in rsp);
    assert.match(rsp.closeResponse.error, /^connection stalled: the endpoint read nothing for 0\.3s/);
    assert.equal(t.endpointCount, 0);
  });

  test("a server that did not announce flow control (a Go server) never gets a FLOW packet", async () => {
    const ep = await deafEndpoint();
    cleanups.push(() => void ep.close());
    const { t, call } = tunnel(300, false);
    cleanups.push(() => t.close("test over"));
    const id = await dialThrough(t, call, ep.port, 1n);
    const chunk = Buffer.alloc(64 * 1024, 7);
    for (let i = 0; i < 400; i++) {
      t.receive(sealFrame(encodeData(id, chunk, FRAME_HEADER)));
      if (i % 16 === 15) await new Promise((r) => setTimeout(r, 5));
    }
    await waitUntil(
      "the stall close",
      () => call.packets().some((p) => "closeResponse" in p && p.closeResponse.connectID === id),
      { timeoutMs: 10_000 },
    );
    assert.deepEqual(call.flows(), [], "only konnectivity packets go to a server that did not announce flow control");
  });

  test("FLOW_PAUSE from the server pauses reading that endpoint only; FLOW_RESUME resumes it", async () => {
    const talkers = await listenTcp((s) => {
      const timer = setInterval(() => s.write("x"), 10);
      s.on("close", () => clearInterval(timer));
    });
    cleanups.push(() => void talkers.close());
    const port = talkers.port;
    const { t, call } = tunnel(0);
    cleanups.push(() => t.close("test over"));
    const a = await dialThrough(t, call, port, 1n);
    const b = await dialThrough(t, call, port, 2n);
    const dataFor = (id: bigint): number => call.packets().filter((p) => "data" in p && p.data.connectID === id).length;
    t.receive(sealFrame(encodeFlowControl(FlowControl.PAUSE, a, FRAME_HEADER)));
    await new Promise((r) => setTimeout(r, 60));
    const aPaused = dataFor(a);
    const bBefore = dataFor(b);
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(dataFor(a), aPaused, "no DATA from the paused endpoint");
    assert.ok(dataFor(b) > bBefore, "the neighbour keeps flowing");
    t.receive(sealFrame(encodeFlowControl(FlowControl.RESUME, a, FRAME_HEADER)));
    await waitUntil("DATA again after FLOW_RESUME", () => dataFor(a) > aPaused, { timeoutMs: 10_000 });
  });
});

describe("ServerTunnel shutdown (the agent stops with connections open)", () => {
  const cleanups: (() => void)[] = [];
  after(() => cleanups.forEach((c) => c()));

  test("CLOSE_RSP with the reason for each open connection, then END_STREAM; a session that never closes is destroyed after the flush bound", async () => {
    const ep = await deafEndpoint();
    cleanups.push(() => void ep.close());
    const { t, call } = tunnel(0);
    cleanups.push(() => t.close("test over"));
    const a = await dialThrough(t, call, ep.port, 1n);
    const b = await dialThrough(t, call, ep.port, 2n);
    const before = call.sent.length;
    const started = Date.now();
    const done = t.shutdown("agent shutting down", 200);
    assert.ok(t.closed);
    assert.equal(t.endpointCount, 0);
    const closes = call
      .packets()
      .slice(-2)
      .map((p) => ("closeResponse" in p ? p.closeResponse : undefined));
    assert.deepEqual(closes, [
      { connectID: a, error: "agent shutting down" },
      { connectID: b, error: "agent shutting down" },
    ]);
    assert.equal(call.packets().at(-1)?.type, PacketType.CLOSE_RSP);
    assert.equal(call.sent.length, before + 2, "one CLOSE_RSP per connection, nothing else");
    assert.equal(call.endedAfter, before + 2, "END_STREAM after the CLOSE_RSPs");
    assert.equal(call.closed, false, "not reset while the frames flush");
    assert.ok(!t.session.destroyed);
    await done;
    assert.ok(Date.now() - started >= 150, "waited for the flush bound");
    assert.ok(t.session.destroyed);
    assert.equal(call.closed, true, "reset once the bound ran out");
  });

  test("a dial still pending gets its DIAL_RSP with the reason", async () => {
    const call = new FakeServerCall();
    const t = tunnelOver(call, { connect: () => new net.Socket(), dialTimeoutMs: 60_000 });
    cleanups.push(() => t.close("test over"));
    const answer = dialAddress(t, call, "10.0.0.1:443", 7n);
    await waitUntil("the dial is pending", () => t.endpointCount === 1);
    const done = t.shutdown("agent shutting down", 50);
    assert.deepEqual(await answer, { random: 7n, connectID: 0n, error: "agent shutting down" });
    await done;
  });
});
