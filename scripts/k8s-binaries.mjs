#!/usr/bin/env node
// Builds the real Kubernetes / etcd / OCM binaries used by the multi-cluster test
// environment (test/infra/env) from the Go module proxy into a content-addressed cache.
// Nothing of those projects is committed: only test/infra/k8s/versions.json and the
// wrapper modules test/infra/k8s/{etcd,kubernetes,ocm}/go.mod + go.sum.
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
// module cache, from which test/infra/env reads the CRDs at run time).
// Builds go to a temp dir renamed into place: an interrupted build never leaves a
// half cache. See docs/testing/environment.md; the shared machinery (Go check, cache key,
// build, install, signals, pruning) is scripts/go-build-cache.mjs.

import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildCache, createTool, goEnv, goModInputs, run } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "k8s-binaries-recipe-1";

const tool = createTool(import.meta.url);
const { log, die } = tool;
const k8sDir = join(tool.repoRoot, "test", "infra", "k8s");
const etcdDir = join(k8sDir, "etcd");
const kubeDir = join(k8sDir, "kubernetes");
const ocmDir = join(k8sDir, "ocm");
const cacheRoot = join(tool.repoRoot, ".cache", "k8s-binaries");
const VERSIONS = "test/infra/k8s/versions.json";
const WRAPPERS = [
  ["etcd", etcdDir],
  ["kubernetes", kubeDir],
  ["ocm", ocmDir],
];

// versions.json must agree with what the wrapper go.mod files require.
function checkPins(v) {
  tool.checkPins(
    [
      [etcdDir, "go.etcd.io/etcd/server/v3", v.etcd],
      [kubeDir, "k8s.io/kubernetes", v.kubernetes],
      [ocmDir, "open-cluster-management.io/ocm", v.ocm],
    ],
    { versionsFile: VERSIONS, hint: "run: node scripts/k8s-binaries.mjs --update-wrappers" },
  );
  // Every staging module must be replaced by its published v0.X.Y.
  const staging = `v0.${v.kubernetes.slice(3)}`;
  const gomod = tool.readText(join(kubeDir, "go.mod"));
  for (const m of gomod.matchAll(/^\s*(k8s\.io\/\S+)\s+=>\s+(\S+)\s+(\S+)/gm)) {
    if (m[1] !== m[2] || m[3] !== staging) {
      die(`test/infra/k8s/kubernetes/go.mod: replace ${m[1]} => ${m[2]} ${m[3]}, expected ${m[1]} ${staging}`);
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
    // Our test peer: client-go through a konnectivity-client tunnel, as the seeds' Go snippet.
    { name: "clientgo-tunnel", dir: kubeDir, pkg: "./clientgo-tunnel" },
    { name: "registration", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/registration" },
    { name: "registration-operator", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/registration-operator" },
    { name: "addon", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/addon" },
    { name: "placement", dir: ocmDir, pkg: "open-cluster-management.io/ocm/cmd/placement" },
  ];
}

// Regenerate test/infra/k8s/kubernetes/go.mod from k8s.io/kubernetes@<version>/go.mod: every
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
  log(`wrote test/infra/k8s/kubernetes/go.mod (${mods.length} staging modules => ${staging})`);
  const gets = [
    [etcdDir, `go.etcd.io/etcd/server/v3@${v.etcd}`],
    [ocmDir, `open-cluster-management.io/ocm@${v.ocm}`],
  ];
  for (const [dir, spec] of gets) {
    await run("go", ["get", spec], { cwd: dir, what: `go get ${spec}` });
  }
  for (const [label, dir] of WRAPPERS) {
    log(`go mod tidy in test/infra/k8s/${label} ...`);
    // sigs.k8s.io/about-api (an OCM dependency, a pseudo-version) is not in the checksum
    // database as served through the proxy (404); its hash is pinned in the committed go.sum.
    await run("go", ["mod", "tidy"], {
      cwd: dir,
      env: { ...goEnv, GONOSUMDB: "sigs.k8s.io/about-api" },
      what: `go mod tidy (${label})`,
    });
  }
  log("done; commit test/infra/k8s/*/go.mod and go.sum");
}

async function main() {
  const flags = tool.parseArgs(["--force", "--update-wrappers"]);
  const versions = JSON.parse(tool.readText(join(k8sDir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build etcd, kube-apiserver and OCM for test/infra/env",
  });
  if (flags.has("--update-wrappers")) return updateWrappers(versions);
  checkPins(versions);

  await buildCache(tool, {
    cacheRoot,
    recipe: RECIPE,
    goLine,
    keyInputs: [
      ["versions.json", join(k8sDir, "versions.json")],
      ...WRAPPERS.flatMap(([label, dir]) => goModInputs(label, dir)),
      ["clientgo-tunnel/main.go", join(kubeDir, "clientgo-tunnel", "main.go")],
    ],
    versions,
    targets: targets(versions),
    force: flags.has("--force"),
    keepOld: 1, // each key is ~600 MB
    note: "a cold build takes ~10 min on 2 cores",
    heartbeatMs: 60_000,
    // nice: another engineer's tests may be running on the same 2 cores.
    goBuildOptions: { nice: 10, extraArgs: process.env.K8S_BINARIES_P ? ["-p", process.env.K8S_BINARIES_P] : [] },
    extraManifest: ocmApiManifest,
  });
}

// Where the OCM API module (CRDs) lives in the module cache; test/infra/env reads them from there.
async function ocmApiManifest() {
  const apiJson = await run("go", ["list", "-mod=readonly", "-m", "-json", "open-cluster-management.io/api"], {
    cwd: ocmDir,
    what: "go list -m open-cluster-management.io/api",
  });
  const api = JSON.parse(apiJson);
  if (!api.Dir || !existsSync(api.Dir)) throw new Error(`open-cluster-management.io/api not in the module cache`);
  return { ocmApi: api.Version, ocmApiDir: api.Dir };
}

main().catch((err) => die(err?.stack ?? String(err)));
