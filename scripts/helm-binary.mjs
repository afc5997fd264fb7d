#!/usr/bin/env node
// Builds `helm` (for the chart tests, charts/cluster-proxy) from the Go module proxy into a
// content-addressed cache, with the version flags helm's own Makefile sets: without them
// `helm version` says "v3.22" and helm assumes Kubernetes v1.20, so a chart's kubeVersion check
// fails. Nothing of helm is committed: only test/infra/helm/versions.json and the wrapper module
// test/infra/helm/go.mod + go.sum.
//
//   node scripts/helm-binary.mjs           build if needed; last stdout line = bin dir (holds `helm`)
//   node scripts/helm-binary.mjs --force   rebuild even if the cache is warm
//
// Progress goes to stderr; stdout carries only the bin directory (last line).
// Cache: .cache/helm/<key>/bin/helm, <key> hashing versions.json, go.mod/go.sum, `go version` and
// this recipe. The build goes to a temp dir renamed into place (scripts/go-build-cache.mjs), so an
// interrupted build never leaves a half cache. A cold build takes about 5 CPU-minutes.

import { join } from "node:path";
import { buildCache, createTool, goModInputs } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "helm-recipe-1";

const tool = createTool(import.meta.url);
const helmDir = join(tool.repoRoot, "test", "infra", "helm");
const cacheRoot = join(tool.repoRoot, ".cache", "helm");
const VERSIONS = "test/infra/helm/versions.json";
const HELM = "helm.sh/helm/v3";

/**
 * The -X flags of helm's Makefile: its version, and the Kubernetes version it assumes by default
 * (1.<minor of the client-go it is built with>), used by `helm template`/`lint` capabilities.
 */
function helmLdflags(helmVersion) {
  const clientGo = tool.readText(join(helmDir, "go.mod")).match(/^\s*k8s\.io\/client-go\s+v0\.(\d+)\./m);
  if (!clientGo) tool.die("test/infra/helm/go.mod does not require k8s.io/client-go (run go mod tidy there)");
  const vars = [
    [`${HELM}/internal/version.version`, helmVersion],
    [`${HELM}/internal/version.gitTreeState`, "clean"],
    [`${HELM}/pkg/lint/rules.k8sVersionMajor`, "1"],
    [`${HELM}/pkg/lint/rules.k8sVersionMinor`, clientGo[1]],
    [`${HELM}/pkg/chartutil.k8sVersionMajor`, "1"],
    [`${HELM}/pkg/chartutil.k8sVersionMinor`, clientGo[1]],
  ];
  return ["-s -w", ...vars.map(([k, v]) => `-X ${k}=${v}`)].join(" ");
}

async function main() {
  const flags = tool.parseArgs(["--force"]);
  const versions = JSON.parse(tool.readText(join(helmDir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build helm for the chart tests",
    requiredBy: `helm ${versions.helm}'s go.mod; pinned in ${VERSIONS}`,
  });
  tool.checkPins([[helmDir, HELM, versions.helm]], { versionsFile: VERSIONS });

  await buildCache(tool, {
    cacheRoot,
    recipe: RECIPE,
    goLine,
    keyInputs: [["versions.json", join(helmDir, "versions.json")], ...goModInputs("helm", helmDir)],
    versions,
    targets: [{ name: "helm", dir: helmDir, pkg: `${HELM}/cmd/helm`, ldflags: helmLdflags(versions.helm) }],
    force: flags.has("--force"),
    keepOld: 1,
    printBinDir: true,
    note: "a cold build takes about 5 CPU-minutes",
    heartbeatMs: 60_000,
    goBuildOptions: { nice: 10 },
  });
}

main().catch((err) => tool.die(err?.stack ?? String(err)));
