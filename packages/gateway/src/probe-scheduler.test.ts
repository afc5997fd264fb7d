/**
 * The probe schedule on an injected clock: each key runs at once, then again the interval after
 * its last job ended; never more jobs at once than the concurrency; a removed key stops, a
 * stopped scheduler starts nothing.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { ProbeScheduler } from "./probe-scheduler.js";

/** Let the jobs' settled promises run their continuations. */
const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A scheduler whose jobs end when the test says so. */
function scheduler(clock: ManualClock, concurrency: number) {
  const runs: string[] = [];
  const pending = new Map<string, () => void>();
  const s = new ProbeScheduler({
    intervalMs: 1_000,
    concurrency,
    clock,
    run: (key) => {
      runs.push(key);
      return new Promise<void>((resolve) => pending.set(key, resolve));
    },
  });
  const finish = async (key: string): Promise<void> => {
    pending.get(key)?.();
    pending.delete(key);
    await settle();
  };
  return { s, runs, finish };
}

describe("ProbeScheduler", () => {
  test("a key runs again the interval after its job ended, on the injected clock", async () => {
    const clock = new ManualClock();
    const { s, runs, finish } = scheduler(clock, 4);
    s.start();
    s.add("a");
    assert.deepEqual(runs, ["a"], "at once the first time");
    clock.advance(5_000);
    assert.deepEqual(runs, ["a"], "never two at once for one key");
    await finish("a");
    clock.advance(999);
    assert.deepEqual(runs, ["a"]);
    clock.advance(1);
    assert.deepEqual(runs, ["a", "a"], "the interval after it ended");
    s.stop();
    await finish("a");
    clock.advance(10_000);
    assert.deepEqual(runs, ["a", "a"], "stopped: nothing starts");
    assert.equal(clock.armed, 0, "and no timer is left");
  });

  test("no more jobs at once than the concurrency; a removed key stops", async () => {
    const clock = new ManualClock();
    const { s, runs, finish } = scheduler(clock, 2);
    s.start();
    for (const k of ["a", "b", "c"]) s.add(k);
    assert.deepEqual(runs, ["a", "b"]);
    assert.equal(s.inFlight, 2);
    await finish("a");
    assert.deepEqual(runs, ["a", "b", "c"], "c takes the free slot");
    s.remove("b");
    await finish("b");
    await finish("c");
    clock.advance(1_000);
    assert.deepEqual(runs, ["a", "b", "c", "a", "c"], "b was removed");
    s.stop();
  });
});
