/**
 * Issue 18, point 3: the suite cannot hang or skip silently. The runner gives every test a
 * deadline; a suite without its prerequisites fails under CI=true; the scale tests' load and
 * failure reports work as documented. Issue 30, point 6: suites import test/framework and
 * test/infra, never another suite (docs/testing/framework.md).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
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

/**
 * The folder a file of test/ or bench/ belongs to, for the layering rule: "framework", "infra",
 * "bench" or "suite:<name>".
 */
function layerOf(repoPath: string): string | undefined {
  const [top, second, ...rest] = repoPath.split("/");
  if (top === "bench") return "bench";
  // A file directly in test/ belongs to no folder.
  if (top !== "test" || second === undefined || rest.length === 0) return undefined;
  return second === "framework" || second === "infra" ? second : `suite:${second}`;
}

/** Whether a file in layer `from` may import one in layer `to` (docs/testing/framework.md). */
function mayImport(from: string, to: string): boolean {
  if (from === to) return true;
  if (to === "framework") return from !== "framework";
  if (to === "infra") return from !== "framework" && from !== "infra";
  return false;
}

/** Every relative module specifier of a source file: static imports, re-exports and `import()`. */
function relativeImports(source: string): string[] {
  const specs: string[] = [];
  for (const m of source.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)["'](\.{1,2}\/[^"']+)["']/g)) specs.push(m[1]!);
  return specs;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(REPO, dir), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && /\.(ts|mts|mjs)$/.test(e.name) && !e.parentPath.includes("node_modules"))
    .map((e) => relative(REPO, join(e.parentPath, e.name)));
}

test("suites import test/framework and test/infra, never another suite; bench/ only those two", () => {
  assert.deepEqual(
    relativeImports('import { a } from "../x.js";\nexport * from "./y.js";\nawait import("../../z.js");'),
    ["../x.js", "./y.js", "../../z.js"],
  );
  assert.ok(mayImport("suite:gateway", "infra") && mayImport("infra", "framework") && mayImport("bench", "framework"));
  assert.ok(!mayImport("suite:gateway", "suite:addon-manager") && !mayImport("framework", "infra"));
  assert.ok(!mayImport("infra", "suite:env") && !mayImport("bench", "suite:integration"));
  const files = [...sourceFiles("test"), ...sourceFiles("bench")];
  assert.ok(files.includes("test/framework/harness.ts") && files.includes("test/infra/env/fixture.ts"));
  const violations: string[] = [];
  for (const file of files) {
    const from = layerOf(file)!;
    for (const spec of relativeImports(readFileSync(join(REPO, file), "utf8"))) {
      const target = relative(REPO, resolve(REPO, dirname(file), spec));
      const to = layerOf(target);
      if (to !== undefined && !mayImport(from, to)) violations.push(`${file} imports ${target} (${from} -> ${to})`);
    }
  }
  assert.deepEqual(
    violations,
    [],
    "see docs/testing/framework.md: move what both need into test/framework or test/infra",
  );
});
