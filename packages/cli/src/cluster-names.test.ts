import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runCaptured } from "./testing/capture.js";

let dir = "";
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cp-cluster-names-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

const run = runCaptured;

const RULE =
  /cluster name "East_1" is invalid: use lowercase letters, digits and "-", starting and ending with a letter or digit, at most 63 characters \(a DNS-1123 label, as OCM requires of a ManagedCluster name\)/;

test("every command that takes a cluster name refuses East_1 with the same rule, naming its flag", async () => {
  const commands: [string, string[]][] = [
    [
      "--cluster-name",
      ["agent", "--cluster-name", "East_1", "--ca-cert", join(dir, "missing.crt"), "--log-level", "silent"],
    ],
    ["--cluster", ["certs", "--dir", join(dir, "certs"), "--cluster", "East_1"]],
    ["--clusters", ["up", "--clusters", "east,East_1", "--state-dir", join(dir, "up")]],
    ["--cluster", ["kubeconfig", "--cluster", "East_1", "--token", "t", "--output", join(dir, "k")]],
    ["--cluster", ["health", "--cluster", "East_1"]],
  ];
  for (const [flag, args] of commands) {
    const r = await run(args);
    assert.equal(r.code, 2, `${args[0]}: exit 2 (${r.err})`);
    assert.ok(r.err.startsWith(`cluster-proxy ${args[0]}: ${flag}: `), `${args[0]} names ${flag}: ${r.err}`);
    assert.match(r.err, RULE, args[0]);
  }
});

test("a valid name (leading digit, 63 characters) passes the name check", async () => {
  const r = await run(["certs", "--dir", join(dir, "ok"), "--cluster", `7${"a".repeat(62)}`]);
  assert.equal(r.code, 0, r.err);
});
