#!/usr/bin/env -S node --initial-old-space-size=64 --max-semi-space-size=4
// The `cluster-proxy` command of a checkout. npm links a package's `bin` into node_modules/.bin
// only when the file exists at install time, and dist/ does not exist before `npm run build`:
// this committed launcher is what `npm ci` links (so `npx cluster-proxy` runs ours), and it loads
// the built command, or says how to build it.
//
// The `#!` line carries the V8 flags every Node major accepts. On a node that wants others
// (nodeFlagsFor: Node 24 and later; the agent's own for `agent`), the launcher replaces itself
// with the same command under those flags (process.execve; given after the `#!` ones, so they
// win), once.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const main = new URL("../dist/main.js", import.meta.url);
if (!existsSync(main)) {
  const root = fileURLToPath(new URL("../../..", import.meta.url));
  process.stderr.write(
    `cluster-proxy: not built yet (${fileURLToPath(main)} is missing): run "npm run build" in ${root}\n`,
  );
  process.exit(1);
}
const { nodeFlagsToApply } = await import(new URL("../dist/node-flags.js", import.meta.url).href);
const apply = nodeFlagsToApply(process.execArgv, process.versions.node, process.argv[2]);
if (apply.length > 0 && typeof process.execve === "function") {
  process.execve(process.execPath, [
    process.execPath,
    ...process.execArgv,
    ...apply,
    fileURLToPath(main),
    ...process.argv.slice(2),
  ]);
}
await import(main.href);
