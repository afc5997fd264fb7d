/**
 * Per-connection flow control in the relay (docs/design/flow-control.md): a reader over its budget
 * makes the relay send FLOW_PAUSE to the agent and never pauses the shared agent stream; the
 * stream is held only past the hard limit (an agent that ignores FLOW_PAUSE); a reader that
 * reads nothing for the stall timeout is closed with the stall error.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FlowControl, PacketType, encodeData, encodeFlowControl, peekPacket } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { Backend, type DialFailure, type FrontendEnd, type TunnelConnection } from "../agents/backend.js";
import { IDLE_METRICS_SOURCE, ServerMetrics } from "../metrics.js";
import { Relay, packetFrame } from "./relay.js";
import { FakeCall } from "../testing/fake-call.js";

/** A frontend whose buffer the test sets by hand. */
class FakeEnd implements FrontendEnd {
  conn: TunnelConnection | undefined;
  buffer = 0;
  out = 0;
  sourcePaused = false;
  stalledWith: string | undefined;
  closedWith: string | undefined;
  dialSucceeded(_random: bigint, conn: TunnelConnection): void {
    this.conn = conn;
  }
  dialFailed(_random: bigint, failure: DialFailure): void {
    throw new Error(`dial failed: ${failure.text}`);
  }
  data(_conn: TunnelConnection, frame: Buffer): number {
    this.buffer += frame.length;
    return this.buffer;
  }
  delivered(): number {
    return this.out;
  }
  buffered(): number {
    return this.buffer;
  }
  pauseSource(_conn: TunnelConnection, paused: boolean): void {
    this.sourcePaused = paused;
  }
  stallClose(_conn: TunnelConnection, why: string): void {
    this.stalledWith = why;
  }
  closed(_conn: TunnelConnection, _frame: Buffer | undefined, cut?: string): void {
    this.closedWith = cut ?? "";
  }
  /** The reader consumed `n` bytes. */
  read(n: number): void {
    this.buffer -= n;
    this.out += n;
  }
}

const metrics = new ServerMetrics(IDLE_METRICS_SOURCE);

function setup(
  stallMs: number,
  clock?: ManualClock,
): { relay: Relay; call: FakeCall; backend: Backend; open: (id: bigint) => FakeEnd } {
  const relay = new Relay({
    clock,
    strategies: ["default"],
    backendDialTimeoutMs: 0,
    logger: silentLogger,
    metrics,
    connectionStallTimeoutMs: stallMs,
    connectionBufferBudget: 1000,
    connectionBufferLimit: 5000,
  });
  const call = new FakeCall();
  const backend = new Backend(
    "agent-1",
    { host: [], cidr: [], ipv4: [], ipv6: [], defaultRoute: false },
    call.asServerCall(),
  );
  relay.addBackend(backend);
  let random = 1n;
  const open = (id: bigint): FakeEnd => {
    const end = new FakeEnd();
    const r = random++;
    relay.dial(end, { address: "10.0.0.1:80", random: r });
    relay.fromAgent(
      backend,
      packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random: r, connectID: id, error: "" } }),
    );
    assert.ok(end.conn, "dial succeeded");
    return end;
  };
  return { relay, call, backend, open };
}

const data = (id: bigint, n: number): Buffer => sealFrame(encodeData(id, Buffer.alloc(n, 1), FRAME_HEADER));

describe("relay per-connection flow control", () => {
  test("over budget: FLOW_PAUSE to the agent, the agent stream keeps flowing; drained: FLOW_RESUME", () => {
    const { relay, call, backend, open } = setup(0);
    const slow = open(1n);
    const fast = open(2n);
    relay.fromAgent(backend, data(1n, 600));
    assert.deepEqual(call.flows(), []);
    relay.fromAgent(backend, data(1n, 600)); // 1200+ > budget 1000
    assert.deepEqual(call.flows(), [{ type: FlowControl.PAUSE, connectID: 1n }]);
    assert.equal(call.paused, false, "the shared stream is not paused for one reader");
    relay.fromAgent(backend, data(2n, 600));
    assert.ok(fast.buffer > 0, "the neighbour still gets data");
    relay.fromAgent(backend, data(1n, 600)); // still over: no second PAUSE
    assert.equal(call.flows().length, 1);
    slow.read(slow.buffer);
    slow.conn?.drained();
    assert.deepEqual(call.flows()[1], { type: FlowControl.RESUME, connectID: 1n });
  });

  test("an agent that did not announce flow control (a Go agent) never gets a FLOW packet", () => {
    const { relay, call, backend, open } = setup(0);
    backend.ignoresFlowControl = true;
    const slow = open(1n);
    for (let i = 0; i < 10; i++) relay.fromAgent(backend, data(1n, 600));
    assert.equal(call.paused, true, "fallback: stream held while the reader is over the limit");
    slow.read(slow.buffer);
    slow.conn?.drained();
    assert.equal(call.paused, false);
    assert.deepEqual(call.flows(), [], "only konnectivity packets go to an agent that did not announce flow control");
  });

  test("an agent that ignores FLOW_PAUSE: the stream is held past the limit, released on drain", () => {
    const { relay, call, backend, open } = setup(0);
    const slow = open(1n);
    for (let i = 0; i < 5; i++) relay.fromAgent(backend, data(1n, 600));
    assert.equal(call.paused, false);
    for (let i = 0; i < 5; i++) relay.fromAgent(backend, data(1n, 600)); // > 5000
    assert.equal(call.paused, true, "fallback: stream held while the reader is over the limit");
    slow.read(slow.buffer);
    slow.conn?.drained();
    assert.equal(call.paused, false);
  });

  test("a reader that reads nothing for the stall timeout is closed with the stall error; a slow one is not", () => {
    const clock = new ManualClock();
    const { relay, call, backend, open } = setup(80, clock);
    const stalled = open(1n);
    const slow = open(2n);
    relay.fromAgent(backend, data(1n, 2000));
    relay.fromAgent(backend, data(2n, 2000));
    // The slow one reads a little in every 20 ms, the stalled one nothing.
    for (let t = 20; t < 80; t += 20) {
      clock.advance(20);
      slow.read(10);
    }
    assert.equal(stalled.stalledWith, undefined, "not before the stall timeout");
    clock.advance(20);
    assert.match(stalled.stalledWith ?? "", /connection stalled: the client read nothing for 0\.08s/);
    assert.equal(slow.stalledWith, undefined, "a reader that makes progress is slow, not stalled");
    slow.read(10);
    clock.advance(80);
    assert.equal(slow.stalledWith, undefined, "still slow, not stalled, one stall timeout later");
    const closes = call.sent
      .map((f) => peekPacket(f.subarray(FRAME_HEADER)))
      .filter((p) => p.type === PacketType.CLOSE_REQ);
    assert.deepEqual(
      closes.map((p) => p.connectID),
      [1n],
      "the agent is told to close the stalled connection",
    );
    relay.fromAgent(backend, data(2n, 10));
    assert.equal(relay.establishedCount(), 2, "the stalled one waits for CLOSE_RSP");
  });

  test("FLOW_PAUSE / FLOW_RESUME from the agent pause and resume that connection's source", () => {
    const { relay, backend, open } = setup(0);
    const a = open(1n);
    const b = open(2n);
    relay.fromAgent(backend, flowFrame(FlowControl.PAUSE, 1n));
    assert.equal(a.sourcePaused, true);
    assert.equal(b.sourcePaused, false);
    relay.fromAgent(backend, flowFrame(FlowControl.RESUME, 1n));
    assert.equal(a.sourcePaused, false);
  });

  test("a CLOSE_RSP with an error ends the frontend with that error", () => {
    const { relay, backend, open } = setup(0);
    const a = open(1n);
    relay.fromAgent(
      backend,
      packetFrame({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: 1n, error: "connection stalled: x" } }),
    );
    assert.equal(a.closedWith, "connection stalled: x");
  });
});

function flowFrame(type: FlowControl, id: bigint): Buffer {
  return sealFrame(encodeFlowControl(type, id, FRAME_HEADER));
}
