import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keepAliveClock, realClock } from "./clock.js";
import { ManualClock } from "./testing/manual-clock.js";

describe("ManualClock", () => {
  test("fires due timers in order when advanced, not before; cleared ones never", () => {
    const clock = new ManualClock();
    const fired: string[] = [];
    clock.setTimeout(() => fired.push(`b@${clock.now()}`), 20);
    clock.setTimeout(() => fired.push(`a@${clock.now()}`), 10);
    const cleared = clock.setTimeout(() => fired.push("cleared"), 15);
    clock.clearTimeout(cleared);
    assert.equal(clock.armed, 2);
    clock.advance(9);
    assert.deepEqual(fired, []);
    clock.advance(11);
    assert.deepEqual(fired, ["a@10", "b@20"], "each runs at its own time");
    assert.equal(clock.now(), 20);
    assert.equal(clock.armed, 0);
  });

  test("a timer armed by a firing one runs in the same advance when due by then", () => {
    const clock = new ManualClock();
    const fired: number[] = [];
    const tick = (): void => {
      fired.push(clock.now());
      if (fired.length < 3) clock.setTimeout(tick, 10);
    };
    clock.setTimeout(tick, 10);
    clock.advance(25);
    assert.deepEqual(fired, [10, 20]);
    clock.advance(5);
    assert.deepEqual(fired, [10, 20, 30]);
  });
});

describe("realClock", () => {
  test("runs a timer (unref'd), clears another, and reads Date.now", async () => {
    const before = Date.now();
    assert.ok(realClock.now() >= before);
    realClock.clearTimeout(realClock.setTimeout(() => assert.fail("cleared timer ran"), 0));
    realClock.clearTimeout(undefined);
    await new Promise<void>((resolve) => {
      realClock.setTimeout(resolve, 1);
      // unref'd: keep the test's event loop alive meanwhile.
      const hold = setTimeout(() => undefined, 1_000);
      realClock.setTimeout(() => clearTimeout(hold), 1);
    });
  });
});

describe("keepAliveClock", () => {
  test("runs a timer that keeps the process alive, clears another", async () => {
    keepAliveClock.clearTimeout(keepAliveClock.setTimeout(() => assert.fail("cleared timer ran"), 0));
    keepAliveClock.clearTimeout(undefined);
    const handle = keepAliveClock.setTimeout(() => undefined, 1);
    // The handle is Node's timer (the Clock interface keeps it opaque).
    assert.equal((handle as NodeJS.Timeout).hasRef(), true);
    await new Promise<void>((resolve) => keepAliveClock.setTimeout(resolve, 1));
  });
});
