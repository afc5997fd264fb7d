import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff } from "./backoff.js";

test("grows by the factor, adds bounded jitter, stops at the cap, resets", () => {
  const b = new Backoff({ initialMs: 1000, capMs: 10_000, random: () => 0 });
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6, 7].map(() => b.next()),
    [1000, 1500, 2250, 3375, 5063, 7594, 10000],
  );
  b.reset();
  assert.equal(b.next(), 1000);
  const j = new Backoff({ initialMs: 1000, capMs: 10_000, random: () => 0.999 });
  assert.equal(j.next(), 1100);
  for (let i = 0; i < 20; i++) assert.ok(j.next() <= 10_000);
});
