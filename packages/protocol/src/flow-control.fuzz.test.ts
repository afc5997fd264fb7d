/**
 * Property tests (fast-check) for the flow-control decoder, which the server and the agent run
 * first on every frame a peer sends: arbitrary bytes never make it throw and it recognises only
 * FLOW_PAUSE / FLOW_RESUME; every connectID round-trips; no konnectivity packet is ever read as a
 * flow signal.
 *
 * Runs are bounded and seeded; override with FC_SEED=<n> (and FC_RUNS=<n>).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { FlowControl, decodeFlowControl, encodeFlowControl } from "./flow-control.js";
import { PacketType, encodeData, encodePacket } from "./packet.js";

const SEED = Number(process.env["FC_SEED"] ?? 0x5eed_f10e);
const RUNS = Number(process.env["FC_RUNS"] ?? 2000);
const params = { seed: SEED, numRuns: RUNS };

const connectID = fc.oneof(
  fc.bigInt({ min: 0n, max: 2n ** 63n - 1n }),
  fc.constantFrom(0n, 1n, 127n, 128n, 2n ** 63n - 1n),
);

test(`fuzz: arbitrary bytes give undefined or a PAUSE/RESUME, never a throw (seed ${SEED})`, () => {
  const bytes = fc.oneof(
    fc.uint8Array({ maxLength: 64 }),
    // mutations of a real flow packet: the interesting neighbourhood
    fc
      .tuple(connectID, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }))
      .map(([id, flips]) => {
        const b = Uint8Array.from(encodeFlowControl(FlowControl.PAUSE, id));
        for (const [at, v] of flips) b[at % b.length] = v;
        return b;
      }),
  );
  fc.assert(
    fc.property(bytes, (b) => {
      const r = decodeFlowControl(b);
      if (r === undefined) return;
      assert.ok(r.type === FlowControl.PAUSE || r.type === FlowControl.RESUME);
      assert.ok(r.connectID >= 0n);
    }),
    params,
  );
});

test(`fuzz: every connectID round-trips through encodeFlowControl/decodeFlowControl (seed ${SEED})`, () => {
  fc.assert(
    fc.property(fc.constantFrom(FlowControl.PAUSE, FlowControl.RESUME), connectID, (type, id) => {
      assert.deepEqual(decodeFlowControl(encodeFlowControl(type, id)), { type, connectID: id });
    }),
    params,
  );
});

test(`fuzz: no konnectivity packet is read as a flow signal (seed ${SEED})`, () => {
  fc.assert(
    fc.property(
      connectID,
      fc.uint8Array({ maxLength: 32 }),
      fc.bigInt({ min: 0n, max: 2n ** 63n - 1n }),
      (id, data, random) => {
        assert.equal(decodeFlowControl(encodeData(id, data)), undefined);
        for (const packet of [
          { type: PacketType.CLOSE_REQ, closeRequest: { connectID: id } },
          { type: PacketType.CLOSE_RSP, closeResponse: { connectID: id, error: "" } },
          { type: PacketType.DIAL_CLS, closeDial: { random } },
          { type: PacketType.DIAL_RSP, dialResponse: { random, connectID: id, error: "" } },
        ] as const) {
          assert.equal(decodeFlowControl(encodePacket(packet)), undefined, JSON.stringify(packet.type));
        }
      },
    ),
    params,
  );
});
