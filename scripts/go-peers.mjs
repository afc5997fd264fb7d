#!/usr/bin/env node
// Builds the real Go konnectivity (apiserver-network-proxy) binaries plus our
// small Go test client into a content-addressed cache, for interop tests and
// benchmark baselines. Go is only ever used for these test peers.
//
//   node scripts/go-peers.mjs           build if needed; last stdout line = bin dir
//   node scripts/go-peers.mjs --force   rebuild even if the cache is warm
//
// Progress goes to stderr; stdout carries only the bin directory (last line).
// Cache: .cache/go-peers/<key>/bin/ where <key> hashes versions.json, both
// go.mod/go.sum files, the client's .go sources, `go version` and this recipe.
// Builds go to a temp dir that is renamed into place, so an interrupted build
// never leaves a half cache. See docs/go-peers.md.

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

// Bump when the build commands below change, to invalidate old caches.
const RECIPE = "go-peers-recipe-1";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
const peersDir = join(repoRoot, "test", "go-peers");
const knpDir = join(peersDir, "knp");
const clientDir = join(peersDir, "client");
const cacheRoot = join(repoRoot, ".cache", "go-peers");

const KNP = "sigs.k8s.io/apiserver-network-proxy";
const TARGETS = [
  { name: "proxy-server", dir: knpDir, pkg: `${KNP}/cmd/server` },
  { name: "proxy-agent", dir: knpDir, pkg: `${KNP}/cmd/agent` },
  { name: "proxy-test-client", dir: knpDir, pkg: `${KNP}/cmd/test-client` },
  { name: "http-test-server", dir: knpDir, pkg: `${KNP}/cmd/test-server` },
  { name: "konnectivity-go-client", dir: clientDir, pkg: "." },
];

const log = (msg) => process.stderr.write(`go-peers: ${msg}\n`);

function die(msg) {
  log(`error: ${msg}`);
  process.exit(1);
}

// Environment for every go invocation: never switch toolchains behind our
// back, static binaries. Module downloads are verified against the committed
// go.sum files (go build runs with -mod=readonly, so go.sum is never
// rewritten and a hash mismatch is fatal).
const goEnv = {
  ...process.env,
  GOTOOLCHAIN: "local",
  CGO_ENABLED: "0",
};

function parseGoVersion(s) {
  // "go1.26.8", "go1.27rc1", "devel go1.27-abcdef"
  const m = /go(\d+)\.(\d+)(?:\.(\d+))?/.exec(s);
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

function cmpVersion(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

function readText(path) {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    die(`cannot read ${relative(repoRoot, path)}: ${err.message}`);
  }
}

function checkGo(requiredGo) {
  const res = spawnSync("go", ["version"], { env: goEnv, encoding: "utf8" });
  if (res.error) {
    if (res.error.code === "ENOENT") {
      die(
        `Go toolchain not found: no 'go' on PATH. Go >= ${requiredGo} is needed ` +
          `(pinned in test/go-peers/versions.json) to build the konnectivity test peers.`,
      );
    }
    die(`running 'go version' failed: ${res.error.message}`);
  }
  if (res.status !== 0) {
    die(`'go version' exited ${res.status}: ${res.stderr.trim()}`);
  }
  const line = res.stdout.trim();
  const have = parseGoVersion(line);
  const need = parseGoVersion(`go${requiredGo}`);
  if (!need) die(`bad "go" version in test/go-peers/versions.json: ${requiredGo}`);
  if (!have) die(`cannot parse Go version from '${line}'`);
  if (cmpVersion(have, need) < 0) {
    die(
      `Go ${have.join(".")} is too old: Go >= ${requiredGo} is required ` +
        `(apiserver-network-proxy's go.mod; pinned in test/go-peers/versions.json). ` +
        `GOTOOLCHAIN=local is set, so no newer toolchain is downloaded.`,
    );
  }
  return line;
}

// versions.json must agree with what the go.mod files actually require.
function checkPins(versions) {
  const need = [
    [knpDir, KNP, versions["apiserver-network-proxy"]],
    [knpDir, `${KNP}/konnectivity-client`, versions["konnectivity-client"]],
    [clientDir, `${KNP}/konnectivity-client`, versions["konnectivity-client"]],
  ];
  for (const [dir, mod, ver] of need) {
    const gomod = readText(join(dir, "go.mod"));
    const re = new RegExp(`^\\s*(?:require\\s+)?${mod.replace(/[./]/g, "\\$&")}\\s+(\\S+)`, "m");
    const m = re.exec(gomod);
    if (!m || m[1] !== ver) {
      die(
        `${relative(repoRoot, join(dir, "go.mod"))} requires ${mod} ${m ? m[1] : "(nothing)"}, ` +
          `but test/go-peers/versions.json pins ${ver}`,
      );
    }
  }
}

function cacheKey(goVersionLine) {
  const h = createHash("sha256");
  const add = (label, data) => {
    h.update(`${label}\0${data.length}\0`);
    h.update(data);
  };
  add("recipe", RECIPE);
  add("go", goVersionLine);
  add("versions.json", readFileSync(join(peersDir, "versions.json")));
  for (const [label, dir] of [
    ["knp", knpDir],
    ["client", clientDir],
  ]) {
    add(`${label}/go.mod`, readFileSync(join(dir, "go.mod")));
    add(`${label}/go.sum`, readFileSync(join(dir, "go.sum")));
  }
  for (const f of readdirSync(clientDir)
    .filter((n) => n.endsWith(".go"))
    .sort()) {
    add(`client/${f}`, readFileSync(join(clientDir, f)));
  }
  return h.digest("hex").slice(0, 16);
}

function isComplete(dir) {
  if (!existsSync(join(dir, "manifest.json"))) return false;
  return TARGETS.every((t) => existsSync(join(dir, "bin", t.name)));
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
}

// Remove temp dirs left by interrupted builds, and old cache keys beyond the
// newest few (each key holds ~200 MB of binaries).
function prune(keepKey) {
  if (!existsSync(cacheRoot)) return;
  const keys = [];
  for (const name of readdirSync(cacheRoot)) {
    const p = join(cacheRoot, name);
    const tmp = /^\.tmp-[0-9a-f]+-(\d+)$/.exec(name);
    if (tmp) {
      if (!pidAlive(Number(tmp[1]))) rmSync(p, { recursive: true, force: true });
      continue;
    }
    if (/^[0-9a-f]{16}$/.test(name) && name !== keepKey) {
      keys.push({ p, mtime: statSync(p).mtimeMs });
    }
  }
  keys.sort((a, b) => b.mtime - a.mtime);
  for (const { p } of keys.slice(2)) rmSync(p, { recursive: true, force: true });
}

let currentChild = null;

function goBuild(target, outFile, goTmp) {
  const args = ["build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-o", outFile, target.pkg];
  return new Promise((resolve, reject) => {
    // GOTMPDIR inside our temp dir: a killed `go build` leaves its work dir
    // behind, and this way the cleanup below removes it too.
    const env = { ...goEnv, GOTMPDIR: goTmp };
    const child = spawn("go", args, { cwd: target.dir, env, stdio: ["ignore", "inherit", "pipe"] });
    currentChild = child;
    let stderr = "";
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    child.on("error", reject);
    child.on("close", (code, signal) => {
      currentChild = null;
      if (code === 0) resolve();
      else {
        const where = relative(repoRoot, target.dir);
        reject(
          new Error(
            `building ${target.name} failed (cd ${where} && go ${args.join(" ")}; ` +
              `exit ${code ?? signal}):\n${stderr.trim()}`,
          ),
        );
      }
    });
  });
}

async function main() {
  const argv = process.argv.slice(2);
  const unknown = argv.filter((a) => a !== "--force");
  if (unknown.length) die(`unknown argument(s): ${unknown.join(" ")} (usage: node scripts/go-peers.mjs [--force])`);
  const force = argv.includes("--force");

  const versions = JSON.parse(readText(join(peersDir, "versions.json")));
  const goLine = checkGo(versions.go);
  checkPins(versions);

  const key = cacheKey(goLine);
  const finalDir = join(cacheRoot, key);
  const binDir = join(finalDir, "bin");

  if (!force && isComplete(finalDir)) {
    log(`cached at ${binDir}`);
    process.stdout.write(`${binDir}\n`);
    return;
  }

  mkdirSync(cacheRoot, { recursive: true });
  // Belt and braces: ignored even if the repo's .gitignore loses `.cache/`.
  writeFileSync(join(cacheRoot, ".gitignore"), "*\n");
  prune(key);

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
    // Let `go build` exit before removing the dir it writes into.
    currentChild.once("close", finish);
    currentChild.kill("SIGTERM");
    setTimeout(finish, 5000).unref();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);

  log(`building ${TARGETS.length} binaries with ${goLine} (key ${key}) ...`);
  const t0 = Date.now();
  const timings = {};
  try {
    for (const [i, t] of TARGETS.entries()) {
      const t1 = Date.now();
      log(`building ${t.name} (${i + 1}/${TARGETS.length})...`);
      await goBuild(t, join(tmpDir, "bin", t.name), goTmp);
      timings[t.name] = (Date.now() - t1) / 1000;
      log(`built ${t.name} in ${timings[t.name].toFixed(1)}s (total ${((Date.now() - t0) / 1000).toFixed(1)}s)`);
    }
    rmSync(goTmp, { recursive: true, force: true });
    writeFileSync(
      join(tmpDir, "manifest.json"),
      JSON.stringify(
        {
          key,
          recipe: RECIPE,
          go: goLine,
          versions,
          builtAt: new Date().toISOString(),
          buildSeconds: timings,
          binaries: Object.fromEntries(TARGETS.map((t) => [t.name, t.pkg === "." ? "test/go-peers/client" : t.pkg])),
        },
        null,
        2,
      ) + "\n",
    );
    if (existsSync(finalDir)) {
      // Incomplete leftover (never produced by a rename) or --force.
      rmSync(finalDir, { recursive: true, force: true });
    }
    try {
      renameSync(tmpDir, finalDir);
    } catch (err) {
      // A concurrent run may have won the race; use its result if complete.
      if (!isComplete(finalDir)) throw err;
      cleanup();
    }
    cleanup = () => {};
  } catch (err) {
    cleanup();
    die(err.message);
  }
  log(`done in ${((Date.now() - t0) / 1000).toFixed(1)}s: ${binDir}`);
  process.stdout.write(`${binDir}\n`);
}

main().catch((err) => die(err?.stack ?? String(err)));
