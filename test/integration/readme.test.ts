/** The README stays true (its opening commands, the Node.js versions), and every generated page is up to date. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO } from "../framework/repo.js";

test("README opens with the two commands: run the main job, run all tests", () => {
  const lines = readFileSync(join(REPO, "README.md"), "utf8").split("\n");
  assert.equal(lines[0], "```sh");
  assert.match(lines[1] ?? "", /^npm ci && npm run up\b/);
  assert.match(lines[2] ?? "", /^npm ci && npm test\b/);
  assert.equal(lines[3], "```");
  const pkg = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { scripts: Record<string, string> };
  assert.match(pkg.scripts["up"] ?? "", /cluster-proxy\.js up$/);
  assert.match(readFileSync(join(REPO, ".ci/run"), "utf8"), /npm test/);
});

test("the generated pages (docs/reference, the error table, the chart files) are up to date: npm run docs:flags --check", () => {
  execFileSync(
    process.execPath,
    ["--conditions=source", "--import", "tsx", join(REPO, "scripts/gen-flag-docs.ts"), "--check"],
    {
      cwd: REPO,
      stdio: "pipe",
    },
  );
});

test("README states the Node.js versions image/versions.json pins and the packages' engines", () => {
  const readme = readFileSync(join(REPO, "README.md"), "utf8");
  const versions = JSON.parse(readFileSync(join(REPO, "image", "versions.json"), "utf8")) as {
    node: { version: string };
    nodeSupported: { version: string }[];
  };
  const engines = (
    JSON.parse(readFileSync(join(REPO, "packages", "cli", "package.json"), "utf8")) as { engines: { node: string } }
  ).engines.node;
  assert.ok(readme.includes(`ships Node.js ${versions.node.version}`), `README names ${versions.node.version}`);
  for (const { version } of versions.nodeSupported) assert.ok(readme.includes(`Node.js ${version}`), version);
  assert.ok(readme.includes(`"engines": {"node": "${engines}"}`), `README states engines ${engines}`);
});
