import assert from "node:assert/strict";
import { test } from "node:test";
import { CLUSTER_NAME_MAX_LENGTH, clusterNameProblem, isClusterName } from "./cluster-name.js";

test("cluster names: what OCM accepts for a ManagedCluster (a DNS-1123 label)", () => {
  const accepted = ["east", "mc1", "7staging", "0", "a-b", "a--b", "x".repeat(CLUSTER_NAME_MAX_LENGTH)];
  for (const name of accepted) assert.equal(clusterNameProblem(name), undefined, name);
  const refused = [
    "East_1", // upper case, underscore
    "East",
    "east_1",
    "x".repeat(CLUSTER_NAME_MAX_LENGTH + 1), // 64 characters
    "-east", // leading '-'
    "east-", // trailing '-'
    "prod.east", // dots: a subdomain, not a label (and ambiguous in <host>.<cluster> targets)
    "east.",
    "",
    "bad name",
    "a:443",
    "East/1",
    "ëast",
  ];
  for (const name of refused) {
    assert.equal(isClusterName(name), false, name);
    const problem = clusterNameProblem(name) ?? "";
    assert.ok(problem.startsWith(`cluster name "${name}" is invalid: `), problem);
    assert.match(problem, /DNS-1123 label, as OCM requires of a ManagedCluster name/);
  }
  assert.match(clusterNameProblem("x".repeat(64)) ?? "", /is invalid: 64 characters; /);
});
