#!/usr/bin/env node
// Builds the real `clusteradm` (open-cluster-management.io/clusteradm, for the env test that runs
// `clusteradm proxy health` against the chart: test/chart/workstation.test.ts) from the Go module
// proxy into a content-addressed cache. Nothing of clusteradm is committed: only
// test/infra/clusteradm/versions.json and the wrapper module test/infra/clusteradm/go.mod + go.sum.
// The wrapper replaces open-cluster-management.io/ocm (clusteradm v1.3.1 requires v1.3.1, whose
// module the proxy does not serve) by the test environment's OCM (test/infra/k8s/versions.json);
// clusteradm imports one package of it, the operator's chart renderer, which proxy health never runs.
//
//   node scripts/clusteradm-binary.mjs           build if needed; last stdout line = bin dir
//   node scripts/clusteradm-binary.mjs --force   rebuild even if the cache is warm
//
// Progress goes to stderr; stdout carries only the bin directory (last line), which holds
// `clusteradm`. Cache: .cache/clusteradm/<key>/bin/clusteradm, <key> hashing versions.json,
// go.mod/go.sum, `go version` and this recipe (scripts/go-build-cache.mjs).

import { join } from "node:path";
import { buildCache, createTool, goModInputs, replacedVersion } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "clusteradm-recipe-1";

const tool = createTool(import.meta.url);
const dir = join(tool.repoRoot, "test", "infra", "clusteradm");
const k8sDir = join(tool.repoRoot, "test", "infra", "k8s");
const cacheRoot = join(tool.repoRoot, ".cache", "clusteradm");
const VERSIONS = "test/infra/clusteradm/versions.json";
const CLUSTERADM = "open-cluster-management.io/clusteradm";
const OCM = "open-cluster-management.io/ocm";

/** The -X flags of clusteradm's Makefile, so that `clusteradm version` names the release. */
function ldflags(v) {
  const [major, minor] = v.clusteradm.slice(1).split(".");
  const pkg = `${CLUSTERADM}/pkg/version`;
  const vars = [
    ["versionFromGit", v.clusteradm],
    ["commitFromGit", v.clusteradmCommit],
    ["majorFromGit", major],
    ["minorFromGit", minor],
  ];
  return ["-s -w", ...vars.map(([k, val]) => `-X ${pkg}.${k}=${val}`)].join(" ");
}

async function main() {
  const flags = tool.parseArgs(["--force"]);
  const versions = JSON.parse(tool.readText(join(dir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build clusteradm for the chart's clusteradm test",
    requiredBy: `clusteradm ${versions.clusteradm}'s go.mod; pinned in ${VERSIONS}`,
  });
  tool.checkPins([[dir, CLUSTERADM, versions.clusteradm]], { versionsFile: VERSIONS });
  // The OCM it is built with is the test environment's.
  const envOcm = JSON.parse(tool.readText(join(k8sDir, "versions.json"))).ocm;
  const replaced = replacedVersion(tool.readText(join(dir, "go.mod")), OCM);
  if (versions.ocm !== envOcm || replaced !== versions.ocm) {
    tool.die(
      `${VERSIONS} pins ocm ${versions.ocm} and test/infra/clusteradm/go.mod replaces it by ${replaced ?? "(nothing)"}, ` +
        `but the test environment runs ${envOcm} (test/infra/k8s/versions.json): make all three agree`,
    );
  }

  await buildCache(tool, {
    cacheRoot,
    recipe: RECIPE,
    goLine,
    keyInputs: [["versions.json", join(dir, "versions.json")], ...goModInputs("clusteradm", dir)],
    versions,
    targets: [{ name: "clusteradm", dir, pkg: `${CLUSTERADM}/cmd/clusteradm`, ldflags: ldflags(versions) }],
    force: flags.has("--force"),
    keepOld: 1,
    printBinDir: true,
    note: "a cold build takes about 5 CPU-minutes",
    heartbeatMs: 60_000,
    goBuildOptions: { nice: 19 },
  });
}

main().catch((err) => tool.die(err?.stack ?? String(err)));
