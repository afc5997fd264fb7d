import type * as k8s from "@kubernetes/client-node";
import assert from "node:assert/strict";
import { test } from "node:test";
import { PodCensus } from "../infra/env/pod-census.js";

const pod = (uid: string, ready: boolean, terminating = false): k8s.V1Pod => ({
  metadata: { uid, name: uid, deletionTimestamp: terminating ? new Date(0) : undefined },
  status: { conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
});

test("a surge rollout: every state counted, terminating pods are not running", () => {
  const c = new PodCensus([pod("o1", true), pod("o2", true)]);
  assert.deepEqual(c.apply("ADDED", pod("n1", false)), { running: 3, ready: 2 });
  c.apply("MODIFIED", pod("n1", true));
  assert.deepEqual(c.apply("MODIFIED", pod("o1", true, true)), { running: 2, ready: 2 });
  c.apply("ADDED", pod("n2", false));
  c.apply("DELETED", pod("o1", true, true));
  c.apply("MODIFIED", pod("n2", true));
  c.apply("MODIFIED", pod("o2", true, true));
  c.apply("DELETED", pod("o2", true, true));
  assert.equal(c.maxRunning, 3);
  assert.equal(c.minReady, 2);
  assert.deepEqual(c.now, { running: 2, ready: 2 });
  assert.deepEqual(c.runningNames(), ["n1", "n2"]);
  assert.equal(c.history.length, 9);
});

test("a brief dip in readiness or a brief fourth pod is recorded", () => {
  const c = new PodCensus([pod("o1", true), pod("o2", true)]);
  c.apply("MODIFIED", pod("o1", false));
  c.apply("MODIFIED", pod("o1", true));
  c.apply("ADDED", pod("n1", false));
  c.apply("ADDED", pod("n2", false));
  c.apply("DELETED", pod("n2", false));
  assert.equal(c.minReady, 1);
  assert.equal(c.maxRunning, 4);
});
