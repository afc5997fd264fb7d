#!/usr/bin/env node
// Builds the real Kubernetes / etcd / OCM binaries used by the multi-cluster test
// environment (test/env) from the Go module proxy into a content-addressed cache.
// Nothing of those projects is committed: only test/k8s/versions.json and the
// wrapper modules test/k8s/{etcd,kubernetes,ocm}/go.mod + go.sum.
//
//   node scripts/k8s-binaries.mjs                    build if needed; last stdout line = cache dir
//   node scripts/k8s-binaries.mjs --force            rebuild even if the cache is warm
//   node scripts/k8s-binaries.mjs --update-wrappers  regenerate the kubernetes wrapper go.mod from
//                                                    k8s.io/kubernetes@<version>/go.mod and tidy all
//
// Progress goes to stderr; stdout carries only the cache directory (last line), which
// holds bin/ (etcd, kube-apiserver, kube-controller-manager, kubectl, registration,
// registration-operator, addon, placement) and manifest.json (versions, build times,
// and `ocmApiDir`: the open-cluster-management.io/api module directory in the Go
// module cache, from which test/env reads the CRDs at run time).
// Builds go to a temp dir renamed into place: an interrupted build never leaves a
// half cache. See docs/test-environment.md.

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

// Bump when the build commands below change, to invalidate old caches.
const RECIPE = "k8s-binaries-recipe-1";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
const k8sDir = join(repoRoot, "test", "k8s");
const etcdDir = join(k8sDir, "etcd");
const kubeDir = join(k8sDir, "kubernetes");
const ocmDir = join(k8sDir, "ocm");
const cacheRoot = join(repoRoot, ".cache", "k8s-binaries");
const WRAPPERS = [
  ["etcd", etcdDir],
  ["kubernetes", kubeDir],
  ["ocm", ocmDir],
];

const log = (msg) => process.stderr.write(`k8s-binaries: ${msg}\n`);

function die(msg) {
  log(`error: ${msg}`);
  process.exit(1);
}

// GOTOOLCHAIN=local: never download a toolchain. CGO off: static binaries.
// Builds run with -mod=readonly, so every downloaded module is checked against
// the committed go.sum and go.mod/go.sum are never rewritten.
const goEnv = { ...process.env, GOTOOLCHAIN: "local", CGO_ENABLED: "0" };

function readText(path) {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    die(`cannot read ${relative(repoRoot, path)}: ${err.message}`);
  }
}

function parseGoVersion(s) {
  const m = /go(\d+)\.(\d+)(?:\.(\d+))?/.exec(s);
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

function cmpVersion(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

function checkGo(requiredGo) {
  const res = spawnSync("go", ["version"], { env: goEnv, encoding: "utf8" });
  if (res.error) {
    if (res.error.code === "ENOENT") {
      die(
        `Go toolchain not found: no 'go' on PATH. Go >= ${requiredGo} is needed ` +
          `(pinned in test/k8s/versions.json) to build etcd, kube-apiserver and OCM for test/env.`,
      );
    }
    die(`running 'go version' failed: ${res.error.message}`);
  }
  if (res.status !== 0) die(`'go version' exited ${res.status}: ${res.stderr.trim()}`);
  const line = res.stdout.trim();
  const have = parseGoVersion(line);
  const need = parseGoVersion(`go${requiredGo}`);
  if (!need) die(`bad "go" version in test/k8s/versions.json: ${requiredGo}`);
  if (!have) die(`cannot parse Go version from '${line}'`);
  if (cmpVersion(have, need) < 0) {
    die(
      `Go ${have.join(".")} is too old: Go >= ${requiredGo} is required (test/k8s/versions.json). ` +
        `GOTOOLCHAIN=local is set, so no newer toolchain is downloaded.`,
    );
  }
  return line;
}

function requiredVersion(dir, mod) {
  const gomod = readText(join(dir, "go.mod"));
  const re = new RegExp(`^\\s*(?:require\\s+)?${mod.replace(/[./]/g, "\\$&")}\\s+(v\\S+)`, "m");
  return re.exec(gomod)?.[1] ?? null;
}

// versions.json must agree with what the wrapper go.mod files require.
function checkPins(v) {
  const need = [
    [etcdDir, "go.etcd.io/etcd/server/v3", v.etcd],
    [kubeDir, "k8s.io/kubernetes", v.kubernetes],
    [ocmDir, "open-cluster-management.io/ocm", v.ocm],
  ];
  for (const [dir, mod, ver] of need) {
    const have = requiredVersion(dir, mod);
    if (have !== ver) {
      die(
        `${relative(repoRoot, join(dir, "go.mod"))} requires ${mod} ${have ?? "(nothing)"}, but ` +
          `test/k8s/versions.json pins ${ver} (run: node scripts/k8s-binaries.mjs --update-wrappers)`,
      );
    }
  }
  // Every staging module must be replaced by its published v0.X.Y.
  const staging = `v0.${v.kubernetes.slice(3)}`;
  const gomod = readText(join(kubeDir, "go.mod"));
  for (const m of gomod.matchAll(/^\s*(k8s\.io\/\S+)\s+=>\s+(\S+)\s+(\S+)/gm)) {
    if (m[1] !== m[2] || m[3] !== staging) {
      die(`test/k8s/kubernetes/go.mod: replace ${m[1]} => ${m[2]} ${m[3]}, expected ${m[1]} ${staging}`);
    }
  }
}

function kubeLdflags(v) {
  const [major, minor] = v.kubernetes.slice(1).split(".");
  // buildDate is pinned in versions.json (the tag's publication time, from the proxy's
  // .info) so that the binaries do not depend on when or where they were built.
  const vars = {
    gitVersion: v.kubernetes,
    gitMajor: major,
    gitMinor: minor,
    gitTreeState: "clean",
    buildDate: v.kubernetesBuildDate ?? "1970-01-01T00:00:00Z",
  };
  const out = [];
  for (const pkg of ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"]) {
    for (const [k, val] of Object.entries(vars)) out.push(`-X ${pkg}.${k}=${val}`);
  }
  return out.join(" ");
}

function targets(v) {
  const kube = kubeLdflags(v);
  return [
    { name: "etcd", dir: etcdDir, pkg: "go.etcd.io/etcd/server/v3" },
    { name: "kube-apiserver", dir: kubeDir, pkg: "k8s.io/kubernetes/cmd/kube-apiserver", ldflags: kube },
    {
      name: "kube-controller-manager",
      dir: kubeDir,
      pkg: "k8s.io/kubernetes/cmd/kube-controller-manager",
      ldflags: kube,
    },
    { name: "kubectl", dir: kubeDir, pkg: "k8s.io/kubernetes/cmd/kubectl", ldflags: kube },
    { name: "registration", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/registration" },
    { name: "registration-operator", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/registration-operator" },
    { name: "addon", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/addon" },
    { name: "placement", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/placement" },
  ];
}

function cacheKey(goVersionLine) {
  const h = createHash("sha256");
  const add = (label, data) => {
    h.update(`${label}\0${data.length}\0`);
    h.update(data);
  };
  add("recipe", RECIPE);
  add("go", goVersionLine);
  add("versions.json", readFileSync(join(k8sDir, "versions.json")));
  for (const [label, dir] of WRAPPERS) {
    add(`${label}/go.mod`, readFileSync(join(dir, "go.mod")));
    add(`${label}/go.sum`, readFileSync(join(dir, "go.sum")));
  }
  return h.digest("hex").slice(0, 16);
}

function isComplete(dir, tgts) {
  if (!existsSync(join(dir, "manifest.json"))) return false;
  return tgts.every((t) => existsSync(join(dir, "bin", t.name)));
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
}

// Remove temp dirs of dead builds, and old keys beyond the newest one (each ~600 MB).
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
    if (/^[0-9a-f]{16}$/.test(name) && name !== keepKey) keys.push({ p, mtime: statSync(p).mtimeMs });
  }
  keys.sort((a, b) => b.mtime - a.mtime);
  for (const { p } of keys.slice(1)) rmSync(p, { recursive: true, force: true });
}

let currentChild = null;

function run(cmd, args, opts, what) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"] });
    currentChild = child;
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    let err = "";
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      currentChild = null;
      if (code === 0) resolve(out);
      else
        reject(new Error(`${what} failed (exit ${code ?? signal}):\n${err.trim().split("\n").slice(-40).join("\n")}`));
    });
  });
}

function goBuild(t, outFile, goTmp) {
  const args = ["build", "-mod=readonly", "-trimpath", "-buildvcs=false"];
  if (process.env.K8S_BINARIES_P) args.push("-p", process.env.K8S_BINARIES_P);
  if (t.ldflags) args.push(`-ldflags=${t.ldflags}`);
  args.push("-o", outFile, t.pkg);
  // nice: another engineer's tests may be running on the same 2 cores.
  return run(
    "nice",
    ["-n", "10", "go", ...args],
    { cwd: t.dir, env: { ...goEnv, GOTMPDIR: goTmp } },
    `building ${t.name} (cd ${relative(repoRoot, t.dir)} && go ${args.join(" ")})`,
  );
}

// Regenerate test/k8s/kubernetes/go.mod from k8s.io/kubernetes@<version>/go.mod: every
// `k8s.io/X => ./staging/src/k8s.io/X` becomes `k8s.io/X => k8s.io/X v0.<minor>.<patch>`.
// Then tidy all three wrappers (needs the module proxy).
async function updateWrappers(v) {
  const staging = `v0.${v.kubernetes.slice(3)}`;
  const dl = spawnSync("go", ["mod", "download", "-json", `k8s.io/kubernetes@${v.kubernetes}`], {
    env: goEnv,
    encoding: "utf8",
    cwd: kubeDir,
  });
  if (dl.status !== 0) die(`go mod download k8s.io/kubernetes@${v.kubernetes}: ${dl.stdout}${dl.stderr}`);
  const upstream = readFileSync(JSON.parse(dl.stdout).GoMod, "utf8");
  const mods = [...upstream.matchAll(/^\s*(k8s\.io\/\S+)\s+=>\s+\.\/staging\//gm)].map((m) => m[1]);
  if (mods.length < 20) die(`found only ${mods.length} staging replaces in k8s.io/kubernetes go.mod`);
  const goLine = /^go (\S+)/m.exec(upstream)?.[1] ?? v.go;
  const godebug = /^godebug .*$/m.exec(upstream)?.[0];
  const text =
    `// Generated by: node scripts/k8s-binaries.mjs --update-wrappers (from k8s.io/kubernetes@${v.kubernetes}/go.mod)\n` +
    `module cluster-proxy.local/k8s/kubernetes\n\ngo ${goLine}\n\n` +
    (godebug ? `${godebug}\n\n` : "") +
    `tool (\n\tk8s.io/kubernetes/cmd/kube-apiserver\n\tk8s.io/kubernetes/cmd/kube-controller-manager\n\tk8s.io/kubernetes/cmd/kubectl\n)\n\n` +
    `require k8s.io/kubernetes ${v.kubernetes}\n\nreplace (\n` +
    mods.map((m) => `\t${m} => ${m} ${staging}\n`).join("") +
    ")\n";
  writeFileSync(join(kubeDir, "go.mod"), text);
  log(`wrote test/k8s/kubernetes/go.mod (${mods.length} staging modules => ${staging})`);
  const gets = [
    [etcdDir, `go.etcd.io/etcd/server/v3@${v.etcd}`],
    [ocmDir, `open-cluster-management.io/ocm@${v.ocm}`],
  ];
  for (const [dir, spec] of gets) {
    await run("go", ["get", spec], { cwd: dir, env: goEnv }, `go get ${spec}`);
  }
  for (const [label, dir] of WRAPPERS) {
    log(`go mod tidy in test/k8s/${label} ...`);
    // sigs.k8s.io/about-api (an OCM dependency, a pseudo-version) is not in the checksum
    // database as served through the proxy (404); its hash is pinned in the committed go.sum.
    await run(
      "go",
      ["mod", "tidy"],
      { cwd: dir, env: { ...goEnv, GONOSUMDB: "sigs.k8s.io/about-api" } },
      `go mod tidy (${label})`,
    );
  }
  log("done; commit test/k8s/*/go.mod and go.sum");
}

async function main() {
  const argv = process.argv.slice(2);
  const known = ["--force", "--update-wrappers"];
  const unknown = argv.filter((a) => !known.includes(a));
  if (unknown.length)
    die(`unknown argument(s): ${unknown.join(" ")} (usage: node scripts/k8s-binaries.mjs [--force|--update-wrappers])`);
  const force = argv.includes("--force");

  const versions = JSON.parse(readText(join(k8sDir, "versions.json")));
  const goLine = checkGo(versions.go);
  if (argv.includes("--update-wrappers")) return updateWrappers(versions);
  checkPins(versions);
  const tgts = targets(versions);

  const key = cacheKey(goLine);
  const finalDir = join(cacheRoot, key);

  if (!force && isComplete(finalDir, tgts)) {
    log(`cached at ${finalDir}`);
    process.stdout.write(`${finalDir}\n`);
    return;
  }

  mkdirSync(cacheRoot, { recursive: true });
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
      process.kill(process.pid, sig);
    };
    if (!currentChild) return finish();
    currentChild.once("close", finish);
    currentChild.kill("SIGTERM");
    setTimeout(finish, 5000).unref();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);

  log(`building ${tgts.length} binaries with ${goLine} (key ${key}); a cold build takes ~10 min on 2 cores ...`);
  const t0 = Date.now();
  const timings = {};
  try {
    for (const [i, t] of tgts.entries()) {
      const t1 = Date.now();
      log(`building ${t.name} (${i + 1}/${tgts.length})...`);
      // A heartbeat, so a long compile does not look like a hang.
      const beat = setInterval(
        () => log(`  ... still building ${t.name} (${((Date.now() - t1) / 1000).toFixed(0)}s)`),
        60_000,
      );
      try {
        await goBuild(t, join(tmpDir, "bin", t.name), goTmp);
      } finally {
        clearInterval(beat);
      }
      timings[t.name] = (Date.now() - t1) / 1000;
      log(`built ${t.name} in ${timings[t.name].toFixed(1)}s (total ${((Date.now() - t0) / 1000).toFixed(1)}s)`);
    }
    // Where the OCM API module (CRDs) lives in the module cache; test/env reads them from there.
    const apiJson = await run(
      "go",
      ["list", "-mod=readonly", "-m", "-json", "open-cluster-management.io/api"],
      { cwd: ocmDir, env: goEnv },
      "go list -m open-cluster-management.io/api",
    );
    const api = JSON.parse(apiJson);
    if (!api.Dir || !existsSync(api.Dir)) throw new Error(`open-cluster-management.io/api not in the module cache`);
    rmSync(goTmp, { recursive: true, force: true });
    writeFileSync(
      join(tmpDir, "manifest.json"),
      JSON.stringify(
        {
          key,
          recipe: RECIPE,
          go: goLine,
          versions,
          ocmApi: api.Version,
          ocmApiDir: api.Dir,
          builtAt: new Date().toISOString(),
          buildSeconds: timings,
          totalSeconds: (Date.now() - t0) / 1000,
          binaries: Object.fromEntries(tgts.map((t) => [t.name, t.pkg])),
        },
        null,
        2,
      ) + "\n",
    );
    if (existsSync(finalDir)) rmSync(finalDir, { recursive: true, force: true });
    try {
      renameSync(tmpDir, finalDir);
    } catch (err) {
      if (!isComplete(finalDir, tgts)) throw err;
      cleanup();
    }
    cleanup = () => {};
  } catch (err) {
    cleanup();
    die(err.message);
  }
  log(`done in ${((Date.now() - t0) / 1000).toFixed(1)}s: ${finalDir}`);
  process.stdout.write(`${finalDir}\n`);
}

main().catch((err) => die(err?.stack ?? String(err)));
