// Shared machinery of the scripts that build Go binaries into a content-addressed cache:
// scripts/go-peers.mjs (the konnectivity test peers, docs/testing/go-peers.md) and
// scripts/k8s-binaries.mjs (etcd, Kubernetes and OCM for test/infra/env, docs/testing/environment.md).
// Plain ESM for Node 20, no dependencies. Each script keeps what is its own (which binaries, the
// version pins it checks, ldflags, extra manifest fields) and uses this module for the rest:
//
//   const tool = createTool(import.meta.url);          // log/die with the script's prefix
//   const flags = tool.parseArgs(["--force"]);           // exits on anything unknown
//   const goLine = tool.checkGo({ required, versionsFile, purpose });
//   tool.checkPins([[dir, module, version], ...], { versionsFile });
//   await buildCache(tool, { cacheRoot, recipe: RECIPE, goLine, versions, targets, force, keepOld,
//     keyInputs: [["versions.json", path], ...goModInputs("x", dir)] });
//
// buildCache prints the result directory as the last stdout line; everything else goes to stderr.
// Builds go to <cacheRoot>/.tmp-<key>-<pid>/ and are renamed to <cacheRoot>/<key>/, so an
// interrupted build never leaves a half cache.

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { pidAlive } from "./node-runtime.mjs";

/**
 * @typedef {object} GoTarget One binary to build.
 * @property {string} name file name under bin/
 * @property {string} dir module directory `go build` runs in
 * @property {string} pkg package to build ("." = the module in `dir` itself)
 * @property {string} [ldflags] passed as `-ldflags=...`
 */

/**
 * Environment for every go invocation. GOTOOLCHAIN=local: never download or switch toolchains
 * behind our back. CGO_ENABLED=0: static binaries. Builds also run with -mod=readonly, so every
 * downloaded module is checked against the committed go.sum and go.mod/go.sum are never rewritten
 * (a hash mismatch is fatal).
 */
export const goEnv = { ...process.env, GOTOOLCHAIN: "local", CGO_ENABLED: "0" };

/**
 * Parses "go1.26.8", "go1.27rc1", "devel go1.27-abcdef", "go version go1.26.8 linux/amd64".
 * @param {string} s
 * @returns {[number, number, number] | null} [major, minor, patch], or null if none found
 */
export function parseGoVersion(s) {
  const m = /go(\d+)\.(\d+)(?:\.(\d+))?/.exec(s);
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

/** Compares two parseGoVersion() results: < 0, 0 or > 0. */
export function cmpVersion(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

/**
 * The per-script helpers, for a script in <repo>/scripts/. The log prefix and the usage line come
 * from the script's file name (scripts/go-peers.mjs logs "go-peers: ...").
 * @param {string} scriptUrl the script's import.meta.url
 */
export function createTool(scriptUrl) {
  const file = fileURLToPath(scriptUrl);
  const name = basename(file, ".mjs");
  const repoRoot = join(dirname(file), "..");
  const script = relative(repoRoot, file);

  /** Progress line on stderr, "<name>: <msg>". */
  const log = (msg) => process.stderr.write(`${name}: ${msg}\n`);

  /** Logs "<name>: error: <msg>" and exits 1. */
  function die(msg) {
    log(`error: ${msg}`);
    process.exit(1);
  }

  /** Reads a UTF-8 file; dies with its repo-relative path if it cannot. */
  function readText(path) {
    try {
      return readFileSync(path, "utf8");
    } catch (err) {
      die(`cannot read ${relative(repoRoot, path)}: ${err.message}`);
    }
  }

  /**
   * Checks process.argv against the known flags (dies with a usage line on anything else).
   * @param {string[]} known e.g. ["--force"]
   * @returns {Set<string>} the flags given
   */
  function parseArgs(known) {
    const argv = process.argv.slice(2);
    const unknown = argv.filter((a) => !known.includes(a));
    if (unknown.length) die(`unknown argument(s): ${unknown.join(" ")} (usage: node ${script} [${known.join("|")}])`);
    return new Set(argv);
  }

  /**
   * Finds `go` on PATH and checks it is at least `required`; dies with a clear message otherwise.
   * @param {object} o
   * @param {string} o.required minimum version from versions.json, e.g. "1.26.2"
   * @param {string} o.versionsFile where it is pinned (repo-relative, for messages)
   * @param {string} o.purpose what Go is needed for: "... is needed (pinned in X) to <purpose>."
   * @param {string} [o.requiredBy] why that minimum: "Go >= X is required (<requiredBy>)"; default versionsFile
   * @returns {string} the `go version` line, e.g. "go version go1.26.8 linux/amd64"
   */
  function checkGo({ required, versionsFile, purpose, requiredBy = versionsFile }) {
    const res = spawnSync("go", ["version"], { env: goEnv, encoding: "utf8" });
    if (res.error) {
      if (res.error.code === "ENOENT") {
        die(
          `Go toolchain not found: no 'go' on PATH. Go >= ${required} is needed ` +
            `(pinned in ${versionsFile}) to ${purpose}.`,
        );
      }
      die(`running 'go version' failed: ${res.error.message}`);
    }
    if (res.status !== 0) die(`'go version' exited ${res.status}: ${res.stderr.trim()}`);
    const line = res.stdout.trim();
    const have = parseGoVersion(line);
    const need = parseGoVersion(`go${required}`);
    if (!need) die(`bad "go" version in ${versionsFile}: ${required}`);
    if (!have) die(`cannot parse Go version from '${line}'`);
    if (cmpVersion(have, need) < 0) {
      die(
        `Go ${have.join(".")} is too old: Go >= ${required} is required (${requiredBy}). ` +
          `GOTOOLCHAIN=local is set, so no newer toolchain is downloaded.`,
      );
    }
    return line;
  }

  /**
   * The version `<dir>/go.mod` requires of module `mod` (a `require` line or a line of a require
   * block), or null.
   */
  function requiredVersion(dir, mod) {
    const gomod = readText(join(dir, "go.mod"));
    const re = new RegExp(`^\\s*(?:require\\s+)?${mod.replace(/[./]/g, "\\$&")}\\s+(v\\S+)`, "m");
    return re.exec(gomod)?.[1] ?? null;
  }

  /**
   * Dies unless every `[dir, module, version]` pin from versions.json is what `<dir>/go.mod` requires.
   * @param {[string, string, string][]} pins
   * @param {{ versionsFile: string, hint?: string }} o hint: appended in parentheses, e.g. how to fix
   */
  function checkPins(pins, { versionsFile, hint }) {
    for (const [dir, mod, ver] of pins) {
      const have = requiredVersion(dir, mod);
      if (have !== ver) {
        die(
          `${relative(repoRoot, join(dir, "go.mod"))} requires ${mod} ${have ?? "(nothing)"}, ` +
            `but ${versionsFile} pins ${ver}${hint ? ` (${hint})` : ""}`,
        );
      }
    }
  }

  return { name, repoRoot, log, die, readText, parseArgs, checkGo, checkPins };
}

/** The cache-key inputs of a Go module directory: `[["<label>/go.mod", path], ["<label>/go.sum", path]]`. */
export function goModInputs(label, dir) {
  return [
    [`${label}/go.mod`, join(dir, "go.mod")],
    [`${label}/go.sum`, join(dir, "go.sum")],
  ];
}

/**
 * The version a `replace <mod> => <mod> <version>` line (alone or in a replace block) of the go.mod
 * text `gomod` gives `mod`, or null when it has none.
 * @param {string} gomod
 * @param {string} mod
 */
export function replacedVersion(gomod, mod) {
  const m = new RegExp(`^\\s*(?:replace\\s+)?${mod.replace(/[./]/g, "\\$&")}\\s+=>\\s+(\\S+)\\s+(v\\S+)`, "m").exec(
    gomod,
  );
  return m && m[1] === mod ? m[2] : null;
}

/**
 * The cache key: the first 16 hex chars of a sha256 over the recipe tag, the `go version` line and
 * the given files, each as "<label>\0<byte length>\0<bytes>" in the order given. Same inputs give the
 * same key on any path.
 * @param {string} recipe tag bumped when a script's build commands change
 * @param {string} goLine the `go version` line
 * @param {[string, string][]} inputs [label, path] pairs
 */
export function cacheKey(recipe, goLine, inputs) {
  const h = createHash("sha256");
  const add = (label, data) => {
    h.update(`${label}\0${data.length}\0`);
    h.update(data);
  };
  add("recipe", recipe);
  add("go", goLine);
  for (const [label, path] of inputs) add(label, readFileSync(path));
  return h.digest("hex").slice(0, 16);
}

/** Whether a cache dir holds manifest.json and bin/<name> for every target. */
export function isComplete(dir, targets) {
  if (!existsSync(join(dir, "manifest.json"))) return false;
  return targets.every((t) => existsSync(join(dir, "bin", t.name)));
}

/**
 * Removes temp dirs left by interrupted builds (`.tmp-<key>-<pid>` of dead pids), and old cache
 * keys beyond the `keepOld` newest ones other than `keepKey`.
 */
export function prune(cacheRoot, keepKey, keepOld) {
  if (!existsSync(cacheRoot)) return;
  const keys = [];
  for (const name of readdirSync(cacheRoot)) {
    const p = join(cacheRoot, name);
    const tmp = /^\.tmp-[0-9a-f]+-(\d+)$/.exec(name);
    if (tmp) {
      if (!pidAlive(Number(tmp[1]))) rmSync(p, { recursive: true, force: true });
      continue;
    }
    if (/^[0-9a-f]{16}$/.test(name) && name !== keepKey) keys.push({ p, mtime: statSync(p).mtimeMs });
  }
  keys.sort((a, b) => b.mtime - a.mtime);
  for (const { p } of keys.slice(keepOld)) rmSync(p, { recursive: true, force: true });
}

/** The child run() is waiting for, so that a signal can stop it (one at a time). */
let currentChild = null;

/**
 * Stops currentChild with SIGTERM: its whole process group if run() started it with `group`
 * (`go build` does not pass a SIGTERM on to the compile/link processes it started).
 */
function stopCurrentChild() {
  const { child, group } = currentChild;
  try {
    if (group) process.kill(-child.pid, "SIGTERM");
    else child.kill("SIGTERM");
  } catch {
    // already gone
  }
}

/**
 * Runs a command with stdout and stderr captured (never on our stdout, which is the result).
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ cwd?: string, env?: NodeJS.ProcessEnv, what: string, tailLines?: number, group?: boolean }} o
 *   what: names the command in the error, "<what> failed (exit N):\n<last tailLines lines of stderr>".
 *   group: start it in its own process group, so that a signal to buildCache() stops its children
 *   too; only under buildCache(), whose handler forwards the signal (a terminal's Ctrl-C no longer
 *   reaches such a child directly).
 * @returns {Promise<string>} its stdout
 */
export function run(cmd, args, { cwd, env = goEnv, what, tailLines = 40, group = false }) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: group });
    currentChild = { child, group };
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    let err = "";
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      currentChild = null;
      if (code === 0) resolve(out);
      else
        reject(
          new Error(`${what} failed (exit ${code ?? signal}):\n${err.trim().split("\n").slice(-tailLines).join("\n")}`),
        );
    });
  });
}

/**
 * `go build -mod=readonly -trimpath -buildvcs=false [extraArgs] [-ldflags=...] -o outFile pkg` in
 * target.dir, with GOTMPDIR=goTmp (a killed `go build` leaves its work dir behind; inside our temp
 * dir it is removed with it). Runs in its own process group (see run()): call it under buildCache().
 * Changing this command line changes what both scripts build: bump both scripts' RECIPE tags.
 * @param {GoTarget} t
 * @param {string} outFile
 * @param {string} goTmp
 * @param {{ repoRoot: string, extraArgs?: string[], nice?: number, tailLines?: number }} o
 *   nice: run under `nice -n <nice>`
 */
export function goBuild(t, outFile, goTmp, { repoRoot, extraArgs = [], nice, tailLines }) {
  const args = ["build", "-mod=readonly", "-trimpath", "-buildvcs=false", ...extraArgs];
  if (t.ldflags) args.push(`-ldflags=${t.ldflags}`);
  args.push("-o", outFile, t.pkg);
  const [cmd, cmdArgs] = nice === undefined ? ["go", args] : ["nice", ["-n", String(nice), "go", ...args]];
  return run(cmd, cmdArgs, {
    cwd: t.dir,
    env: { ...goEnv, GOTMPDIR: goTmp },
    group: true,
    what: `building ${t.name} (cd ${relative(repoRoot, t.dir)} && go ${args.join(" ")})`,
    tailLines,
  });
}

/**
 * Makes sure <cacheRoot>/<key>/ (key = cacheKey(recipe, goLine, keyInputs)) holds bin/<name> for
 * every target plus manifest.json, building them one after the other if needed (or if `force`),
 * and prints the result dir as the last stdout line: <cacheRoot>/<key>/bin with `printBinDir`,
 * else <cacheRoot>/<key>. Dies on failure.
 *
 * A build goes to <cacheRoot>/.tmp-<key>-<pid>/ (GOTMPDIR inside it), which is renamed into place
 * once complete. SIGINT/SIGTERM/SIGHUP stop the running child with SIGTERM (for `go build` its
 * whole process group; waiting up to 5 s), remove the temp dir and then end the process with that
 * signal. Before building, prune() drops dead temp dirs and old keys.
 *
 * manifest.json: { key, recipe, go, versions, ...await extraManifest(), builtAt, buildSeconds,
 * totalSeconds, binaries: { name: pkg, or the repo-relative dir for pkg "." } }.
 *
 * @param {ReturnType<typeof createTool>} tool
 * @param {object} o
 * @param {string} o.cacheRoot e.g. <repo>/.cache/go-peers
 * @param {string} o.recipe tag bumped when the script's build commands change
 * @param {string} o.goLine the `go version` line, from tool.checkGo()
 * @param {[string, string][]} o.keyInputs [label, path] of the files the key covers, see cacheKey()
 * @param {object} o.versions the parsed versions.json, recorded in the manifest
 * @param {GoTarget[]} o.targets
 * @param {boolean} o.force rebuild even if cached
 * @param {number} o.keepOld how many other keys prune() keeps
 * @param {boolean} [o.printBinDir]
 * @param {string} [o.note] appended to the "building N binaries ..." line
 * @param {number} [o.heartbeatMs] log "  ... still building X (Ns)" this often during one build; 0 = never
 * @param {{ extraArgs?: string[], nice?: number, tailLines?: number }} [o.goBuildOptions] for goBuild()
 * @param {() => Promise<object> | object} [o.extraManifest] runs after the builds (a child it starts
 *   with run() is stopped by signals too); its fields go into the manifest
 */
export async function buildCache(tool, o) {
  const { cacheRoot, targets } = o;
  const key = cacheKey(o.recipe, o.goLine, o.keyInputs);
  const finalDir = join(cacheRoot, key);
  const result = o.printBinDir ? join(finalDir, "bin") : finalDir;

  if (!o.force && isComplete(finalDir, targets)) {
    tool.log(`cached at ${result}`);
    process.stdout.write(`${result}\n`);
    return;
  }

  mkdirSync(cacheRoot, { recursive: true });
  // Belt and braces: ignored even if the repo's .gitignore loses `.cache/`.
  writeFileSync(join(cacheRoot, ".gitignore"), "*\n");
  prune(cacheRoot, key, o.keepOld);

  const tmpDir = join(cacheRoot, `.tmp-${key}-${process.pid}`);
  rmSync(tmpDir, { recursive: true, force: true });
  mkdirSync(join(tmpDir, "bin"), { recursive: true });
  const goTmp = join(tmpDir, "gotmp");
  mkdirSync(goTmp);
  let cleanup = () => rmSync(tmpDir, { recursive: true, force: true });
  const onSignal = (sig) => {
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      cleanup();
      process.kill(process.pid, sig); // handler was `once`: default action now
    };
    if (!currentChild) return finish();
    // Let the child (`go build`) exit before removing the dir it writes into.
    currentChild.child.once("close", finish);
    stopCurrentChild();
    setTimeout(finish, 5000).unref();
  };
  // SIGHUP too: `go build` runs in its own process group, so a closed terminal does not reach it.
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.once(sig, onSignal);

  const n = targets.length;
  tool.log(`building ${n} binaries with ${o.goLine} (key ${key})${o.note ? `; ${o.note}` : ""} ...`);
  const t0 = Date.now();
  const timings = {};
  try {
    for (const [i, t] of targets.entries()) {
      const t1 = Date.now();
      tool.log(`building ${t.name} (${i + 1}/${n})...`);
      // A heartbeat, so a long compile does not look like a hang.
      const beat = o.heartbeatMs
        ? setInterval(
            () => tool.log(`  ... still building ${t.name} (${((Date.now() - t1) / 1000).toFixed(0)}s)`),
            o.heartbeatMs,
          )
        : undefined;
      try {
        await goBuild(t, join(tmpDir, "bin", t.name), goTmp, { ...o.goBuildOptions, repoRoot: tool.repoRoot });
      } finally {
        clearInterval(beat);
      }
      timings[t.name] = (Date.now() - t1) / 1000;
      tool.log(`built ${t.name} in ${timings[t.name].toFixed(1)}s (total ${((Date.now() - t0) / 1000).toFixed(1)}s)`);
    }
    const extra = o.extraManifest ? await o.extraManifest() : {};
    rmSync(goTmp, { recursive: true, force: true });
    const manifest = {
      key,
      recipe: o.recipe,
      go: o.goLine,
      versions: o.versions,
      ...extra,
      builtAt: new Date().toISOString(),
      buildSeconds: timings,
      totalSeconds: (Date.now() - t0) / 1000,
      binaries: Object.fromEntries(
        targets.map((t) => [t.name, t.pkg === "." ? relative(tool.repoRoot, t.dir) : t.pkg]),
      ),
    };
    writeFileSync(join(tmpDir, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
    if (existsSync(finalDir)) {
      // Incomplete leftover (never produced by a rename) or --force.
      rmSync(finalDir, { recursive: true, force: true });
    }
    try {
      renameSync(tmpDir, finalDir);
    } catch (err) {
      // A concurrent run may have won the race; use its result if complete.
      if (!isComplete(finalDir, targets)) throw err;
      cleanup();
    }
    cleanup = () => {};
  } catch (err) {
    cleanup();
    tool.die(err.message);
  }
  tool.log(`done in ${((Date.now() - t0) / 1000).toFixed(1)}s: ${result}`);
  process.stdout.write(`${result}\n`);
}
