import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { TerminalError, WorkQueue } from "./work-queue.js";

/** Let the queue's workers run what is ready (turns of the event loop; no time passes). */
const settle = async (): Promise<void> => {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
};

describe("WorkQueue", () => {
  it("runs a key queued many times once, and again if it was queued while running", async () => {
    const runs: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const queue = new WorkQueue(
      async (key) => {
        runs.push(key);
        if (runs.length === 1) await gate;
      },
      () => undefined,
      { timers: new ManualClock() },
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("a");
    queue.add("a");
    await settle();
    assert.deepEqual(runs, ["a"]);
    queue.add("a"); // while running: once more afterwards
    queue.add("a");
    release();
    await settle();
    assert.deepEqual(runs, ["a", "a"]);
    stop.abort();
    await running;
  });

  it("retries a failing key with growing delays and reports each failure", async () => {
    const clock = new ManualClock();
    const times: number[] = [];
    const errors: number[] = [];
    const queue = new WorkQueue(
      () => {
        times.push(clock.now());
        return times.length < 3 ? Promise.reject(new Error("boom")) : Promise.resolve();
      },
      (_key, _err, retryInMs) => errors.push(retryInMs ?? -1),
      { baseDelayMs: 20, maxDelayMs: 1000, timers: clock },
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("k");
    await settle();
    for (const _ of [1, 2]) {
      clock.advance(errors.at(-1)! - 1);
      await settle();
      assert.equal(times.length, errors.length, "not before its delay");
      clock.advance(1);
      await settle();
    }
    assert.equal(times.length, 3);
    assert.deepEqual(times, [0, errors[0], errors[0]! + errors[1]!]);
    assert.ok(errors[1]! >= errors[0]! / 2 && errors[1]! <= 40, `delays ${errors.join(",")}`);
    stop.abort();
    await running;
  });

  it("requeues a key when the handler asks to look again later", async () => {
    const clock = new ManualClock();
    let runs = 0;
    const queue = new WorkQueue(
      () => {
        runs++;
        return Promise.resolve(runs === 1 ? { requeueAfterMs: 20 } : undefined);
      },
      () => undefined,
      { timers: clock },
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("k");
    await settle();
    clock.advance(19);
    await settle();
    assert.equal(runs, 1);
    clock.advance(1);
    await settle();
    assert.equal(runs, 2);
    assert.equal(clock.armed, 0, "nothing more asked for");
    stop.abort();
    await running;
  });

  it("retries a routine failure (a conflict) after the base delay, without growing the backoff", async () => {
    const clock = new ManualClock();
    const reports: [number, boolean][] = [];
    let runs = 0;
    const conflict = new Error("409 Conflict");
    const queue = new WorkQueue(
      () => {
        runs++;
        return Promise.reject(runs <= 4 ? conflict : new Error("boom"));
      },
      (_key, _err, retryInMs, routine) => reports.push([retryInMs ?? -1, routine]),
      { baseDelayMs: 20, maxDelayMs: 10_000, isRoutine: (err) => err === conflict, timers: clock },
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("k");
    await settle();
    for (let i = 0; i < 4; i++) {
      clock.advance(20);
      await settle();
    }
    stop.abort();
    await running;
    assert.deepEqual(reports.slice(0, 4), [
      [20, true],
      [20, true],
      [20, true],
      [20, true],
    ]);
    // The first real failure starts the backoff from the beginning.
    assert.equal(reports[4]![1], false);
    assert.ok(reports[4]![0] <= 40, `first backoff ${reports[4]![0]}`);
  });

  it("does not retry a terminal error; the key runs again when queued again", async () => {
    const clock = new ManualClock();
    const runs: string[] = [];
    const reports: [string, number | undefined][] = [];
    const queue = new WorkQueue<"bad" | "good">(
      (key) => {
        runs.push(key);
        return key === "bad" ? Promise.reject(new TerminalError("spec refused")) : Promise.resolve();
      },
      (key, _err, retryInMs) => reports.push([key, retryInMs]),
      { baseDelayMs: 1, maxDelayMs: 1, timers: clock },
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("bad");
    await settle();
    assert.deepEqual(reports, [["bad", undefined]]);
    assert.equal(clock.armed, 0, "no retry is scheduled");
    queue.add("good");
    clock.advance(1_000);
    await settle();
    assert.deepEqual(runs, ["bad", "good"]);
    queue.add("bad");
    await settle();
    assert.deepEqual(runs, ["bad", "good", "bad"]);
    stop.abort();
    await running;
  });
});
