/**
 * Issue 18, point 3: the suite cannot hang or skip silently. The runner gives every test a
 * deadline; a suite without its prerequisites fails under CI=true; the scale tests' load and
 * failure reports work as documented.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpuBurnersFromEnv, startCpuBurners } from "../framework/cpu-burners.js";
import { groupReasons } from "../framework/failure-reasons.js";
import { REPO } from "../framework/repo.js";
import { prerequisiteSkip } from "../framework/prerequisites.js";
import { waitFor } from "../framework/waits.js";

test("scripts/test.sh gives every test a deadline (--test-timeout), and a hanging test fails by it", () => {
  const script = readFileSync(join(REPO, "scripts/test.sh"), "utf8");
  assert.match(script, /"--test-timeout=\$timeout_ms"/);
  assert.match(script, /timeout_ms=\$\{CP_TEST_TIMEOUT_MS:-\d+\}/);
  const dir = mkdtempSync(join(tmpdir(), "cp-hang-"));
  try {
    const file = join(dir, "hang.test.mjs");
    // Pending for 5 s, far past the 300 ms deadline (a bare pending promise would let the loop empty).
    writeFileSync(
      file,
      'import { test } from "node:test";\ntest("hangs", () => new Promise((r) => setTimeout(r, 5000)));\n',
    );
    const started = Date.now();
    const r = spawnSync(process.execPath, ["--test", "--test-timeout=300", file], {
      encoding: "utf8",
      timeout: 60_000,
      // Not as a child of this runner (it would report to us instead of failing).
      env: Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== "NODE_TEST_CONTEXT")),
    });
    assert.notEqual(r.status, 0, `a hanging test fails:\n${r.stdout}`);
    assert.match(r.stdout, /timed out after 300ms|cancelled/);
    assert.ok(Date.now() - started < 60_000);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a suite missing its prerequisites skips with the reason, but fails under CI=true", () => {
  assert.deepEqual(prerequisiteSkip("needs nft", {}), { skip: "needs nft" });
  assert.deepEqual(prerequisiteSkip("needs nft", { CI: "true" }), { skip: false, missing: "needs nft" });
  assert.deepEqual(prerequisiteSkip(undefined, { CI: "true" }), { skip: false });
});

test("CP_TEST_CPU_BURNERS starts that many CPU-bound processes and stops them", async () => {
  assert.equal(cpuBurnersFromEnv({}), 0);
  assert.equal(cpuBurnersFromEnv({ CP_TEST_CPU_BURNERS: "2" }), 2);
  assert.throws(() => cpuBurnersFromEnv({ CP_TEST_CPU_BURNERS: "two" }), /CP_TEST_CPU_BURNERS/);
  const stop = startCpuBurners(1);
  // Our children running the burner's program (tsx keeps an esbuild child too).
  const burners = (): string[] =>
    spawnSync("ps", ["-o", "pid=,args=", "--ppid", String(process.pid)])
      .stdout.toString()
      .split("\n")
      .filter((line) => line.includes("for (;;) {}"));
  const children = (): number => burners().length;
  try {
    await waitFor("the burner to run", () => children() >= 1, 10_000);
  } finally {
    await stop();
  }
  await waitFor("the burner to be gone", () => children() === 0, 10_000);
});

test("failure reasons are reported grouped, most frequent first", () => {
  const text = groupReasons([
    "dial timeout after 5000 ms",
    "connect ECONNREFUSED 10.0.0.1:8091",
    "dial timeout after 5001 ms",
    "dial timeout after 4999 ms",
  ]);
  assert.equal(text, "  3 x dial timeout after N ms\n  1 x connect ECONNREFUSED N.N.N.N:N");
});
