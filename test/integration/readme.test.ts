/** The README stays true: its opening commands and the generated flag reference. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO } from "./harness.js";

test("README opens with the two commands: run the main job, run all tests", () => {
  const lines = readFileSync(join(REPO, "README.md"), "utf8").split("\n");
  assert.equal(lines[0], "```sh");
  assert.match(lines[1] ?? "", /^npm ci && npm run up\b/);
  assert.match(lines[2] ?? "", /^npm ci && npm test\b/);
  assert.equal(lines[3], "```");
  const pkg = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { scripts: Record<string, string> };
  assert.match(pkg.scripts["up"] ?? "", /main\.js up/);
  assert.match(readFileSync(join(REPO, ".ci/run"), "utf8"), /npm test/);
});

test("README flag reference is generated from the option schemas and up to date", () => {
  execFileSync(
    process.execPath,
    ["--conditions=source", "--import", "tsx", join(REPO, "scripts/gen-flag-docs.ts"), "--check"],
    {
      cwd: REPO,
      stdio: "pipe",
    },
  );
});
