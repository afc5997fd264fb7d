#!/usr/bin/env -S node --initial-old-space-size=64 --max-semi-space-size=4
// The `cluster-proxy` command of a checkout. npm links a package's `bin` into node_modules/.bin
// only when the file exists at install time, and dist/ does not exist before `npm run build`:
// this committed launcher is what `npm ci` links (so `npx cluster-proxy` runs ours), and it loads
// the built command, or says how to build it.
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
await import(main.href);
