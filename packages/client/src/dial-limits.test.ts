/** A dial's limits on an injected clock: the deadline, the time left, the timeout and the signal. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { remainingMs, startDialLimits, withinDialLimits } from "./dial-limits.js";

test("the deadline and the time left are the injected clock's", () => {
  const clock = new ManualClock();
  const limits = startDialLimits("east:443", 1_000, undefined, clock);
  assert.equal(remainingMs(limits), 1_000);
  clock.advance(400);
  assert.equal(remainingMs(limits), 600);
  clock.advance(5_000);
  assert.equal(remainingMs(limits), 0, "never negative");
});

test("work that outlasts the deadline is a timeout at the deadline; what it yields later is discarded", async () => {
  const clock = new ManualClock();
  let deliver: (value: string) => void = () => undefined;
  const work = new Promise<string>((resolve) => (deliver = resolve));
  const discarded: string[] = [];
  let failed = false;
  const waiting = withinDialLimits(work, startDialLimits("east:443", 1_000, undefined, clock), (v) =>
    discarded.push(v),
  );
  waiting.catch(() => (failed = true));
  clock.advance(999);
  await new Promise((r) => setImmediate(r));
  assert.equal(failed, false, "not before the deadline");
  clock.advance(1);
  await assert.rejects(waiting, { reason: "timeout", message: "dial to east:443 timed out after 1000 ms" });
  deliver("late socket");
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(discarded, ["late socket"]);
});

test("work done in time cancels the timer; an abort wins over the clock", async () => {
  const clock = new ManualClock();
  assert.equal(
    await withinDialLimits(
      Promise.resolve("ok"),
      startDialLimits("east:443", 1_000, undefined, clock),
      () => undefined,
    ),
    "ok",
  );
  assert.equal(clock.armed, 0, "the deadline's timer is cancelled");
  const controller = new AbortController();
  const waiting = withinDialLimits(
    new Promise<string>(() => undefined),
    startDialLimits("east:443", 1_000, controller.signal, clock),
    () => undefined,
  );
  controller.abort(new Error("stop"));
  await assert.rejects(waiting, { reason: "context", message: "dial to east:443 aborted: stop" });
  assert.equal(clock.armed, 0);
});
