import assert from "node:assert/strict";
import { test } from "node:test";
import { type PodView, canonicalJson, intOrPercent, planRollout } from "../infra/env/rollout.js";

const pod = (name: string, hash: string, ready: boolean, seq: number, terminating = false): PodView => ({
  name,
  hash,
  ready,
  terminating,
  seq,
});

test("intOrPercent rounds like Kubernetes", () => {
  assert.equal(intOrPercent(undefined, 3, "25%", true), 1);
  assert.equal(intOrPercent(undefined, 3, "25%", false), 0);
  assert.equal(intOrPercent("50%", 3, "25%", false), 1);
  assert.equal(intOrPercent(2, 3, "25%", false), 2);
  assert.throws(() => intOrPercent("x%", 3, "25%", false), /invalid int-or-percent/);
});

test("scales the current template up and down", () => {
  assert.deepEqual(planRollout(3, "h", undefined, []), { create: 3, delete: [] });
  const p = [pod("a", "h", true, 1), pod("b", "h", false, 2), pod("c", "h", true, 3)];
  // Not-ready first, then newest.
  assert.deepEqual(planRollout(1, "h", undefined, p), { create: 0, delete: ["b", "c"] });
});

test("a rolling update with maxSurge 1 / maxUnavailable 0 never drops below the desired ready count", () => {
  const s = { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } };
  let pods = [pod("o1", "old", true, 1), pod("o2", "old", true, 2), pod("o3", "old", true, 3)];
  let seq = 10;
  for (let step = 0; step < 20; step++) {
    const plan = planRollout(3, "new", s, pods);
    pods = pods.filter((p) => !plan.delete.includes(p.name));
    assert.ok(pods.filter((p) => p.ready).length >= 3, `step ${step}: ${JSON.stringify(pods)}`);
    assert.ok(pods.length + plan.create <= 4);
    for (let i = 0; i < plan.create; i++) pods.push(pod(`n${++seq}`, "new", false, seq));
    // New pods become ready one step later.
    pods = pods.map((p) => ({ ...p, ready: true }));
    if (pods.every((p) => p.hash === "new") && pods.length === 3) break;
  }
  assert.deepEqual(
    pods.map((p) => p.hash),
    ["new", "new", "new"],
  );
});

test("maxUnavailable lets old pods go before new ones are ready; Recreate waits for old pods to stop", () => {
  const s = { rollingUpdate: { maxSurge: 0, maxUnavailable: 1 } };
  const pods = [pod("o1", "old", true, 1), pod("o2", "old", true, 2)];
  assert.deepEqual(planRollout(2, "new", s, pods), { create: 0, delete: ["o2"] });
  const r = { type: "Recreate" };
  assert.deepEqual(planRollout(2, "new", r, pods), { create: 0, delete: ["o1", "o2"] });
  assert.deepEqual(planRollout(2, "new", r, [pod("o1", "old", false, 1, true)]), { create: 0, delete: [] });
  assert.deepEqual(planRollout(2, "new", r, []), { create: 2, delete: [] });
});

test("canonicalJson is the same for typed and plain-JSON forms of one object", () => {
  const typed = {
    metadata: { creationTimestamp: undefined, labels: { b: "2", a: "1" } },
    spec: { x: null, when: new Date(0) },
  };
  const plain = { spec: { when: "1970-01-01T00:00:00.000Z" }, metadata: { labels: { a: "1", b: "2" } } };
  assert.equal(canonicalJson(typed), canonicalJson(plain));
  assert.notEqual(canonicalJson({ a: 1 }), canonicalJson({ a: 2 }));
});
