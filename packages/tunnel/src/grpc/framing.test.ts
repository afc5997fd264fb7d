import { test } from "node:test";
import assert from "node:assert/strict";
import { FrameDecoder, frameMessage } from "./framing.js";

function collect(max = 1024): { dec: FrameDecoder; frames: Buffer[] } {
  const frames: Buffer[] = [];
  return { dec: new FrameDecoder(max, (f) => frames.push(Buffer.from(f))), frames };
}

test("frames split at every possible boundary are reassembled exactly", () => {
  const msgs = [Buffer.from("a"), Buffer.alloc(0), Buffer.alloc(300, 7), Buffer.from("tail")];
  const wire = Buffer.concat(msgs.map((m) => frameMessage(m)));
  for (let cut = 0; cut <= wire.length; cut++) {
    for (const step of [1, 3, 7]) {
      const { dec, frames } = collect();
      dec.push(wire.subarray(0, cut));
      for (let i = cut; i < wire.length; i += step) dec.push(wire.subarray(i, Math.min(wire.length, i + step)));
      assert.deepEqual(
        frames.map((f) => f.subarray(5)),
        msgs,
        `cut ${cut} step ${step}`,
      );
    }
  }
});

test("a frame inside one chunk is delivered without copying", () => {
  const wire = frameMessage(Buffer.from("xyz"));
  let seen: Buffer | undefined;
  new FrameDecoder(10, (f) => (seen = f)).push(wire);
  assert.equal(seen?.buffer, wire.buffer);
});

test("oversized and compressed messages are refused with the gRPC status to send", () => {
  const { dec } = collect(4);
  assert.throws(() => dec.push(frameMessage(Buffer.alloc(5))), { grpcStatus: 8 });
  const compressed = frameMessage(Buffer.from("a"));
  compressed[0] = 1;
  assert.throws(() => collect().dec.push(compressed), { grpcStatus: 12 });
});
