import assert from "node:assert/strict";
import { test } from "node:test";
import { formatTunnelHealth, parseTunnelHealth } from "./addon-health.js";

test("the Available message counts replicas, names each failing one, and parses back", () => {
  const msg = formatTunnelHealth([
    { server: "cluster-proxy-a", address: "10.0.0.5", ok: true, latencyMs: 3 },
    { server: "cluster-proxy-b", address: "10.0.0.6", ok: false, error: "no agent connected for cluster mc1" },
  ]);
  assert.equal(
    msg,
    "tunnel works through 1 of 2 proxy-servers; cluster-proxy-b (10.0.0.6): no agent connected for cluster mc1",
  );
  assert.deepEqual(parseTunnelHealth(msg), { reachable: 1, servers: 2 });
  assert.equal(
    formatTunnelHealth([{ server: "a", address: "x", ok: true }]),
    "tunnel works through 1 of 1 proxy-server",
  );
  assert.deepEqual(parseTunnelHealth("tunnel works through 1 of 1 proxy-server"), { reachable: 1, servers: 1 });
  assert.equal(parseTunnelHealth("0 of 1 proxy-agents connected"), undefined);
  assert.equal(parseTunnelHealth(undefined), undefined);
});
