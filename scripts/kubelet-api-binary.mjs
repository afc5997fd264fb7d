#!/usr/bin/env node
// Builds the kubelet-api test peer (test/infra/k8s/kubelet-api: the kubelet's containerLogs, exec, attach
// and portForward endpoints for the test environment's process kubelet, on k8s.io/cri-streaming)
// into a content-addressed cache. Its own wrapper module, so that changing it does not change the
// key of the much larger scripts/k8s-binaries.mjs cache.
//
//   node scripts/kubelet-api-binary.mjs           build if needed; last stdout line = bin dir
//   node scripts/kubelet-api-binary.mjs --force   rebuild even if the cache is warm
//
// Progress goes to stderr; stdout carries only the bin directory (last line), which holds
// `kubelet-api`. Cache: .cache/kubelet-api/<key>/bin/, <key> hashing test/infra/k8s/versions.json, the
// module's go.mod/go.sum and .go sources, `go version` and this recipe. See docs/testing/environment.md.

import { readdirSync } from "node:fs";
import { join } from "node:path";
import { buildCache, createTool, goModInputs } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "kubelet-api-recipe-1";

const tool = createTool(import.meta.url);
const k8sDir = join(tool.repoRoot, "test", "infra", "k8s");
const dir = join(k8sDir, "kubelet-api");
const cacheRoot = join(tool.repoRoot, ".cache", "kubelet-api");
const VERSIONS = "test/infra/k8s/versions.json";

async function main() {
  const flags = tool.parseArgs(["--force"]);
  const versions = JSON.parse(tool.readText(join(k8sDir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build the kubelet-api test peer for test/infra/env",
  });
  // The streaming package must be the one of the environment's Kubernetes version (v1.X.Y -> v0.X.Y).
  tool.checkPins([[dir, "k8s.io/cri-streaming", `v0.${versions.kubernetes.slice(3)}`]], { versionsFile: VERSIONS });
  const sources = readdirSync(dir)
    .filter((n) => n.endsWith(".go"))
    .sort();
  await buildCache(tool, {
    cacheRoot,
    recipe: RECIPE,
    goLine,
    keyInputs: [
      ["versions.json", join(k8sDir, "versions.json")],
      ...goModInputs("kubelet-api", dir),
      ...sources.map((f) => [`kubelet-api/${f}`, join(dir, f)]),
    ],
    versions,
    targets: [{ name: "kubelet-api", dir, pkg: "." }],
    force: flags.has("--force"),
    keepOld: 2,
    printBinDir: true,
    goBuildOptions: { nice: 10 },
  });
}

main().catch((err) => tool.die(err?.stack ?? String(err)));
