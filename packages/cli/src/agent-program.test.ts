/**
 * The agent's own command tree (agent-program.ts) and its bundle (scripts/build-agent-bundle.ts):
 * `cluster-proxy agent` behaves as in the whole CLI, and the built executables run it from the
 * bundle, loading no module of the workspace's other files. The bundle tests need `npm run build`.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { runAgentCli } from "./agent-program.js";
import { capture, runCaptured } from "./testing/capture.js";

const run = promisify(execFile);
const dist = fileURLToPath(new URL("../dist/", import.meta.url));

async function agentCaptured(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const ctx = capture();
  const code = await runAgentCli(args, ctx);
  return { code, out: ctx.out.join(""), err: ctx.err.join("") };
}

test("the agent's command tree: the same help, version, Go flag forms and errors as `cluster-proxy agent`", async () => {
  for (const args of [
    ["--help"],
    ["--version"],
    ["--bogus-flag"],
    ["-v=3", "--cluster-name=Not_A_Label"],
    ["--proxy-server-port", "x"],
  ]) {
    const whole = await runCaptured(["agent", ...args]);
    assert.deepEqual(await agentCaptured(args), whole, args.join(" "));
    assert.ok(whole.out !== "" || whole.err !== "", args.join(" "));
  }
});

test("the built agent bundle: main.js and proxy-agent.js run it, it loads no other workspace module", async () => {
  assert.ok(
    existsSync(join(dist, "agent-bundle.js")),
    "packages/cli/dist/agent-bundle.js is missing: run npm run build",
  );
  const dir = await mkdtemp(join(tmpdir(), "cp-agent-bundle-"));
  try {
    // Reports at exit every module node's ES loader loaded (the CommonJS ones pino needs included).
    const preload = join(dir, "report.mjs");
    await writeFile(
      preload,
      [
        "import { registerHooks } from 'node:module';",
        "const urls = [];",
        "registerHooks({ load(url, ctx, next) { urls.push(url); return next(url, ctx); } });",
        "process.on('exit', () => process.stderr.write('LOADED ' + JSON.stringify(urls) + '\\n'));",
      ].join("\n"),
    );
    const { out: help } = await runCaptured(["agent", "--help"]);
    const packagesDir = new URL("../../", pathToFileURL(dist)).href;
    for (const [entry, args] of [
      ["main.js", ["agent", "--help"]],
      ["proxy-agent.js", ["--help"]],
    ] as const) {
      const res = await run(process.execPath, [`--import=${pathToFileURL(preload).href}`, join(dist, entry), ...args]);
      assert.equal(res.stdout, help, entry);
      const loaded = JSON.parse(/^LOADED (.*)$/m.exec(res.stderr)?.[1] ?? "[]") as string[];
      const ours = loaded.filter((u) => u.startsWith(packagesDir) && !u.includes("/node_modules/"));
      const names = ours.map((u) => u.slice(packagesDir.length));
      assert.ok(names.includes("cli/dist/agent-bundle.js"), `${entry}: ${names.join(", ")}`);
      const others = names.filter(
        (n) => !/^cli\/dist\/(agent-bundle(-[A-Z0-9]+)?|agent-loader|node-flags|main|proxy-agent)\.js$/.test(n),
      );
      assert.deepEqual(others, [], `${entry} loaded workspace modules beside the bundle`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
