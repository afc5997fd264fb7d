/**
 * The fair-turn rule, driven explicitly: sends and drains are calls, so each assertion holds for
 * one sequence of events, however they would be spaced in time.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { TurnScheduler } from "./turn-scheduler.js";

const Q = 100;

/** Let each of `conns` send `chunk`-sized pieces while the stream is backed up, until it must wait; returns bytes per conn. */
function fillTurn(s: TurnScheduler<string>, conns: string[], chunk: number): Map<string, number> {
  const sent = new Map<string, number>(conns.map((c) => [c, 0]));
  // Interleaved like sockets that are all readable: one chunk each, round and round.
  for (let round = 0; round < 100; round++) {
    for (const c of conns) {
      if (s.isWaiting(c)) continue;
      sent.set(c, sent.get(c)! + chunk);
      s.sent(c, chunk, false);
    }
    if (conns.every((c) => s.isWaiting(c))) return sent;
  }
  throw new Error("some connection never had to wait");
}

test("busy connections on a backed-up stream get one quantum per turn, round after round", () => {
  const s = new TurnScheduler<string>(Q);
  const conns = ["a", "b", "c", "d"];
  for (const c of conns) s.add(c);
  for (let turn = 0; turn < 5; turn++) {
    const sent = fillTurn(s, conns, 30);
    for (const [c, bytes] of sent) {
      assert.equal(bytes, 120, `turn ${turn}: ${c} sent up to its quantum and no more`);
    }
    assert.equal(s.waitingCount, 4);
    assert.deepEqual(
      s.nextTurn(false),
      conns,
      "the next turn hands back every waiting connection in the order they waited",
    );
    assert.equal(s.waitingCount, 0);
  }
});

test("a connection sending alone is never held to a quantum", () => {
  const s = new TurnScheduler<string>(Q);
  s.add("a");
  for (let i = 0; i < 50; i++) assert.equal(s.sent("a", 64, false), false);
  s.nextTurn(false);
  for (let i = 0; i < 50; i++) assert.equal(s.sent("a", 64, false), false, "still alone in the next turn");
});

test("a quantum applies only while the stream is backed up (its send returned false)", () => {
  const s = new TurnScheduler<string>(Q);
  s.add("a");
  s.add("b");
  s.sent("b", 1, true);
  for (let i = 0; i < 10; i++) assert.equal(s.sent("a", 64, true), false);
  assert.equal(s.sent("a", 64, false), true, "over the quantum and the stream is backed up: wait");
  assert.equal(s.sent("a", 64, false), false, "already waiting: no second pause");
});

test("competition counts the previous turn too: a connection that sent last turn keeps the quantum in force", () => {
  const s = new TurnScheduler<string>(Q);
  s.add("a");
  s.add("b");
  s.sent("a", 10, false);
  s.sent("b", 10, false);
  s.nextTurn(false);
  // In the new turn only a sends (b waits on its socket), yet b was busy in the last turn.
  assert.equal(s.sent("a", 150, false), true);
});

test("nextTurn(all) resumes every connection, least recently served first", () => {
  const s = new TurnScheduler<string>(Q);
  for (const c of ["a", "b", "c"]) s.add(c);
  s.sent("a", 1, true);
  s.sent("c", 1, true);
  assert.deepEqual(s.nextTurn(true), ["b", "a", "c"]);
});

test("a removed connection is neither waiting nor resumed", () => {
  const s = new TurnScheduler<string>(Q);
  s.add("a");
  s.add("b");
  s.sent("b", 1, false);
  assert.equal(s.sent("a", 200, false), true);
  s.remove("a");
  assert.equal(s.waitingCount, 0);
  assert.deepEqual(s.nextTurn(true), ["b"]);
  assert.equal(s.sent("a", 200, false), false, "unknown connections are not scheduled");
});
