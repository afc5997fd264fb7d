/**
 * Per-connection flow control with an injected clock: FLOW_PAUSE over budget, FLOW_RESUME on
 * drain, the stream hold past the limit (a peer that ignores FLOW_PAUSE), and stall closes that
 * spare a slow but moving reader. No sleeps: time moves only when a test advances it.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FlowControl, decodeFlowControl } from "@cluster-proxy/protocol";
import { FRAME_HEADER } from "../grpc/framing.js";
import { ConnectionFlow, FlowState, stallErrorText } from "./connection-flow.js";
import { ConnectionTable } from "./connection-table.js";
import { SharedStream } from "./shared-stream.js";
import { ManualClock } from "@cluster-proxy/kit/testing";

class Conn {
  readonly flow = new FlowState();
  buffered = 0;
  delivered = 0;
  constructor(readonly connectID: bigint) {}
}

class FakeStream {
  paused = false;
  closed = false;
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
}

function setup(peerFlowControl = true) {
  const timers = new ManualClock();
  const stream = new FakeStream();
  const shared = new SharedStream(stream, !peerFlowControl);
  const table = new ConnectionTable<Conn>();
  const flows: { type: FlowControl; connectID: bigint }[] = [];
  const stalls: { id: bigint; why: string }[] = [];
  const ignored: bigint[] = [];
  const flow = new ConnectionFlow<Conn>(
    { budget: 100, limit: 1000, stallTimeoutMs: 5000, reader: "client", timers },
    {
      stream: () => shared,
      sendFlow: (conn, type, frame) => {
        assert.deepEqual(decodeFlowControl(frame.subarray(FRAME_HEADER)), { type, connectID: conn.connectID });
        flows.push({ type, connectID: conn.connectID });
      },
      isOpen: (conn) => table.holds(conn),
      delivered: (conn) => conn.delivered,
      buffered: (conn) => conn.buffered,
      stalled: (conn, why) => {
        stalls.push({ id: conn.connectID, why });
        table.remove(conn);
        flow.release(conn);
      },
      peerIgnoresFlowControl: (conn) => ignored.push(conn.connectID),
    },
  );
  const open = (id: bigint): Conn => {
    const c = new Conn(id);
    table.add(c);
    return c;
  };
  return { timers, stream, shared, table, flows, stalls, ignored, flow, open };
}

describe("ConnectionFlow", () => {
  test("over budget: one FLOW_PAUSE; drained: one FLOW_RESUME; under budget nothing", () => {
    const { flow, flows, open, timers } = setup();
    const c = open(1n);
    flow.queued(c, 100);
    assert.deepEqual(flows, []);
    flow.queued(c, 101);
    flow.queued(c, 500);
    assert.deepEqual(flows, [{ type: FlowControl.PAUSE, connectID: 1n }]);
    assert.equal(timers.armed, 1, "the stall clock runs while over budget");
    flow.drained(c);
    assert.deepEqual(flows[1], { type: FlowControl.RESUME, connectID: 1n });
    assert.equal(timers.armed, 0);
    flow.drained(c);
    assert.equal(flows.length, 2, "no FLOW_RESUME that is not owed");
  });

  test("a reader that reads nothing for the stall timeout is closed with the stall error", () => {
    const { flow, open, timers, stalls, table } = setup();
    const c = open(1n);
    c.buffered = 300;
    flow.queued(c, 300);
    timers.advance(4999);
    assert.equal(stalls.length, 0);
    timers.advance(1);
    assert.deepEqual(stalls, [{ id: 1n, why: stallErrorText("client", 5000, 300) }]);
    assert.match(stalls[0]!.why, /^connection stalled: the client read nothing for 5s with 300 bytes buffered/);
    assert.equal(table.size, 0);
  });

  test("a slow reader that makes progress is not stalled; the clock restarts", () => {
    const { flow, open, timers, stalls } = setup();
    const c = open(1n);
    flow.queued(c, 300);
    for (let i = 0; i < 5; i++) {
      c.delivered += 10;
      timers.advance(5000);
    }
    assert.deepEqual(stalls, []);
    timers.advance(5000);
    assert.equal(stalls.length, 1, "stalled once it stopped reading");
  });

  test("a connection released (closed) owes nothing: no timer, no FLOW_RESUME", () => {
    const { flow, open, timers, flows, table } = setup();
    const c = open(1n);
    flow.queued(c, 300);
    table.remove(c);
    flow.release(c);
    assert.equal(timers.armed, 0);
    flow.drained(c);
    assert.deepEqual(flows, [{ type: FlowControl.PAUSE, connectID: 1n }]);
  });

  test("past the limit the peer is taken to ignore FLOW_PAUSE: the shared stream is held until every holder drains", () => {
    const { flow, open, stream, shared, ignored, flows } = setup();
    const a = open(1n);
    const b = open(2n);
    flow.queued(a, 1001);
    flow.queued(b, 1001);
    assert.deepEqual(ignored, [1n], "reported once per stream");
    assert.equal(stream.paused, true);
    assert.equal(shared.holds, 2);
    flow.drained(a);
    assert.equal(stream.paused, true, "b still holds it");
    flow.drained(b);
    assert.equal(stream.paused, false);
    assert.deepEqual(
      flows,
      [{ type: FlowControl.PAUSE, connectID: 1n }],
      "once the peer is known to ignore FLOW_PAUSE it gets no more FLOW packets (no FLOW_RESUME either)",
    );
  });

  test("a peer that did not announce flow control gets no FLOW packet, and is held at the limit", () => {
    const { flow, open, stream, flows, ignored, timers } = setup(false);
    const c = open(1n);
    flow.queued(c, 500);
    assert.deepEqual(flows, []);
    assert.equal(timers.armed, 1, "the stall clock runs all the same");
    flow.queued(c, 2000);
    assert.equal(stream.paused, true);
    assert.deepEqual(ignored, [], "known from the start: nothing to report");
    flow.drained(c);
    assert.equal(stream.paused, false);
  });

  test("stall timeout 0: never closed", () => {
    const timers = new ManualClock();
    const shared = new SharedStream(new FakeStream());
    const flow = new ConnectionFlow<Conn>(
      { budget: 1, stallTimeoutMs: 0, reader: "endpoint", timers },
      {
        stream: () => shared,
        sendFlow: () => undefined,
        isOpen: () => true,
        delivered: () => 0,
        buffered: () => 0,
        stalled: () => assert.fail("stalled"),
        peerIgnoresFlowControl: () => undefined,
      },
    );
    flow.queued(new Conn(1n), 10);
    assert.equal(timers.armed, 0);
    assert.equal(flow.limit, 64 * 1024 * 1024, "default limit");
  });
});

describe("ConnectionTable", () => {
  test("removal checks identity: a forgotten connection cannot evict the one that reused its connectID", () => {
    const table = new ConnectionTable<Conn>();
    const old = new Conn(7n);
    const successor = new Conn(7n);
    table.add(old);
    table.add(successor);
    assert.equal(table.remove(old), false);
    assert.equal(table.holds(successor), true);
    assert.equal(table.remove(successor), true);
    assert.equal(table.size, 0);
  });
});
