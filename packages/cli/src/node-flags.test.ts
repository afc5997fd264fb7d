import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { NODE_FLAGS, SHEBANG, missingNodeFlags } from "./node-flags.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "../../..");

test("the cluster-proxy executable starts node with NODE_FLAGS", async () => {
  const main = await readFile(join(import.meta.dirname, "main.ts"), "utf8");
  assert.equal(main.split("\n")[0], SHEBANG);
  // What the kernel runs for that line: env with everything after it as one argument.
  const [env, rest] = [SHEBANG.slice(2).split(" ")[0]!, SHEBANG.slice(2).split(" ").slice(1).join(" ")];
  const { stdout } = await run(env, [rest, "-p", "JSON.stringify(process.execArgv)"]);
  assert.deepEqual((JSON.parse(stdout) as string[]).slice(0, NODE_FLAGS.length), NODE_FLAGS);
});

test("npm start and npm run up pass NODE_FLAGS too", async () => {
  const scripts = (
    JSON.parse(await readFile(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }
  ).scripts;
  for (const name of ["start", "up"]) assert.ok(scripts[name]!.includes(`node ${NODE_FLAGS.join(" ")} `), name);
});

test("missingNodeFlags names the flags a process started without", () => {
  assert.deepEqual(missingNodeFlags([]), NODE_FLAGS);
  assert.deepEqual(missingNodeFlags(["--inspect", ...NODE_FLAGS]), []);
  // V8 accepts either spelling and any value: the operator may have chosen other sizes.
  assert.deepEqual(missingNodeFlags(["--initial_old_space_size=256", "--max_semi_space_size=8"]), []);
  assert.deepEqual(missingNodeFlags(["--initial-old-space-size=64"]), ["--max-semi-space-size=4"]);
});
