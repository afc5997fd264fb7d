import assert from "node:assert/strict";
import { test } from "node:test";
import { formatTunnelHealth, parseTunnelHealth, parseTunnelReplicas } from "./addon-health.js";

test("the Available message counts replicas, names each failing one, and parses back", () => {
  const msg = formatTunnelHealth([
    { server: "cluster-proxy-a", address: "10.0.0.5", ok: true, latencyMs: 3 },
    { server: "cluster-proxy-b", address: "10.0.0.6", ok: false, error: "no agent connected for cluster mc1" },
  ]);
  assert.equal(
    msg,
    "tunnel works through 1 of 2 proxy-servers (cluster-proxy-a); cluster-proxy-b (10.0.0.6): no agent connected for cluster mc1",
  );
  assert.deepEqual(parseTunnelHealth(msg), { reachable: 1, servers: 2 });
  assert.deepEqual(parseTunnelReplicas(msg), { reached: ["cluster-proxy-a"], failing: ["cluster-proxy-b"] });
  assert.equal(
    formatTunnelHealth([{ server: "a", address: "x", ok: true }]),
    "tunnel works through 1 of 1 proxy-server (a)",
  );
  assert.deepEqual(parseTunnelHealth("tunnel works through 1 of 1 proxy-server"), { reachable: 1, servers: 1 });
  assert.equal(parseTunnelHealth("0 of 1 proxy-agents connected"), undefined);
  assert.equal(parseTunnelHealth(undefined), undefined);
});

test("the replicas read back by name: an older message without names, the agents' notes after the failures", () => {
  assert.deepEqual(parseTunnelReplicas("tunnel works through 1 of 1 proxy-server"), {
    reached: undefined,
    failing: [],
  });
  assert.deepEqual(
    parseTunnelReplicas(
      "tunnel works through 0 of 2 proxy-servers; s1 (10.0.0.1): 503 Service Unavailable: no agent; s2 (10.0.0.2): timeout; agent Deployment in mc1: 0 of 1 ready; agents report: p: connected to 0 of 2 proxy-servers",
    ),
    { reached: [], failing: ["s1", "s2"] },
  );
  assert.deepEqual(parseTunnelReplicas("tunnel works through 2 of 2 proxy-servers (s1, s2)"), {
    reached: ["s1", "s2"],
    failing: [],
  });
  assert.equal(parseTunnelReplicas("no proxy-server replica is ready"), undefined);
});
