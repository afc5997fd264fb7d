/**
 * Round robin between busy endpoints of one tunnel: while the server stream is backed up, each
 * endpoint socket reads one quantum per turn (between the stream's "drain" events), so one
 * endpoint with a full kernel buffer cannot take the whole stream.
 *
 * Deterministic: the endpoints never run dry (they write for as long as they are read), and each
 * turn ends when every endpoint waits for the next one (the tunnel's own state), not after some
 * time; so the outcome does not depend on how often the test looks. (The turn rule itself is
 * tested event by event in packages/tunnel/src/engine/turn-scheduler.test.ts.)
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ENDPOINT_SEND_QUANTUM } from "./server-tunnel.js";
import { FakeServerCall, dialThrough, tunnelOver } from "../testing/fake-server-call.js";
import { endlessSource } from "../testing/tcp-endpoints.js";
import { waitUntil } from "@cluster-proxy/tunnel/testing";

test("busy endpoints share a backed-up server stream round robin, one quantum per turn", async () => {
  const src = await endlessSource();
  const call = new FakeServerCall(true);
  const t = tunnelOver(call);
  try {
    const ids: bigint[] = [];
    for (let i = 1; i <= 4; i++) ids.push(await dialThrough(t, call, src.port, BigInt(i)));
    // The first endpoint was alone for a while (no quantum then); once several are busy, each
    // stops at its quantum and waits for the next turn.
    await waitUntil("every endpoint waiting for a turn", () => t.waitingForTurn === ids.length, { timeoutMs: 10_000 });
    for (let turn = 0; turn < 6; turn++) {
      const from = call.sent.length;
      call.emit("drain");
      // Every endpoint reads until it has sent a quantum, then waits for the next turn.
      await waitUntil(`turn ${turn}: every endpoint sent its quantum`, () => t.waitingForTurn === ids.length, {
        timeoutMs: 10_000,
      });
      for (const [id, b] of call.dataBytes(ids, from)) {
        assert.ok(b >= ENDPOINT_SEND_QUANTUM, `turn ${turn}: connection ${id} sent only ${b} bytes in its turn`);
        assert.ok(b < 2 * ENDPOINT_SEND_QUANTUM, `turn ${turn}: connection ${id} sent ${b} bytes in one turn`);
      }
    }
  } finally {
    t.close("test over");
    await src.close();
  }
});

test("a single busy endpoint is not held to a quantum", async () => {
  const src = await endlessSource();
  const call = new FakeServerCall(true);
  const t = tunnelOver(call);
  try {
    const id = await dialThrough(t, call, src.port, 1n);
    // No "drain" ever: only the stream budget (not reached: nothing is buffered) could stop it.
    await waitUntil("8 MiB", () => (call.dataBytes([id]).get(id) ?? 0) >= 8 * 1024 * 1024, { timeoutMs: 10_000 });
    assert.equal(t.waitingForTurn, 0);
  } finally {
    t.close("test over");
    await src.close();
  }
});
