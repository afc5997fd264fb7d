import assert from "node:assert/strict";
import { test } from "node:test";
import { FlowControl, decodeFlowControl, encodeFlowControl } from "./flow-control.js";
import { PacketType, decodePacket, encodeData, peekPacket } from "./packet.js";

test("FLOW_PAUSE / FLOW_RESUME round-trip, with headroom and large connectIDs", () => {
  for (const id of [1n, 127n, 128n, 2n ** 40n, 2n ** 63n - 1n]) {
    for (const type of [FlowControl.PAUSE, FlowControl.RESUME]) {
      const bytes = encodeFlowControl(type, id, 5);
      assert.deepEqual(decodeFlowControl(bytes.subarray(5)), { type, connectID: id });
    }
  }
});

test("a konnectivity decoder (like Go's) sees an unknown packet type and nothing else", () => {
  const bytes = encodeFlowControl(FlowControl.PAUSE, 42n);
  assert.deepEqual(decodePacket(bytes), { type: FlowControl.PAUSE, unknown: true });
  assert.equal(peekPacket(bytes).type, FlowControl.PAUSE);
});

test("other packets and malformed bytes are not flow control", () => {
  assert.equal(decodeFlowControl(encodeData(7n, Buffer.from("hi"))), undefined);
  assert.equal(decodeFlowControl(Buffer.from([0x08, 100, 0x22, 5, 0x08])), undefined);
  assert.equal(decodeFlowControl(Buffer.alloc(0)), undefined);
  assert.notEqual(PacketType.DATA, FlowControl.PAUSE);
});
