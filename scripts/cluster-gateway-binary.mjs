#!/usr/bin/env node
// Builds KubeVela's cluster-gateway (github.com/oam-dev/cluster-gateway, the aggregated apiserver
// `cmd/apiserver` its image runs), for the env test that serves it on the hub and reaches a managed
// cluster through our proxy-servers (test/chart/kubevela-cluster-gateway.test.ts), from the Go module
// proxy into a content-addressed cache. Nothing of cluster-gateway is committed: only
// test/infra/cluster-gateway/versions.json and the wrapper module test/infra/cluster-gateway/go.mod +
// go.sum. The wrapper repeats the three `replace` lines of cluster-gateway's own go.mod (a `replace`
// applies only in the main module): cloud.google.com/go v0.100.2, konnectivity-client v0.0.36 (the
// client it dials the proxy-servers' gRPC door with) and kmodules' apiserver-runtime.
//
//   node scripts/cluster-gateway-binary.mjs           build if needed; last stdout line = bin dir
//   node scripts/cluster-gateway-binary.mjs --force   rebuild even if the cache is warm
//
// Progress goes to stderr; stdout carries only the bin directory (last line), which holds
// `cluster-gateway`. Cache: .cache/cluster-gateway/<key>/bin/cluster-gateway, <key> hashing
// versions.json, go.mod/go.sum, `go version` and this recipe (scripts/go-build-cache.mjs).

import { join } from "node:path";
import { buildCache, createTool, goModInputs, replacedVersion } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "cluster-gateway-recipe-1";

const tool = createTool(import.meta.url);
const dir = join(tool.repoRoot, "test", "infra", "cluster-gateway");
const cacheRoot = join(tool.repoRoot, ".cache", "cluster-gateway");
const VERSIONS = "test/infra/cluster-gateway/versions.json";
const GATEWAY = "github.com/oam-dev/cluster-gateway";
const KONNECTIVITY = "sigs.k8s.io/apiserver-network-proxy/konnectivity-client";

async function main() {
  const flags = tool.parseArgs(["--force"]);
  const versions = JSON.parse(tool.readText(join(dir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build KubeVela's cluster-gateway for the chart's cluster-gateway test",
    requiredBy: `the wrapper module's \`tool\` directive; pinned in ${VERSIONS}`,
  });
  tool.checkPins([[dir, GATEWAY, versions.clusterGateway]], { versionsFile: VERSIONS });
  const replaced = replacedVersion(tool.readText(join(dir, "go.mod")), KONNECTIVITY);
  if (replaced !== versions.konnectivityClient) {
    tool.die(
      `${VERSIONS} pins konnectivity-client ${versions.konnectivityClient} but test/infra/cluster-gateway/go.mod ` +
        `replaces it by ${replaced ?? "(nothing)"}: cluster-gateway ${versions.clusterGateway}'s go.mod replaces it, ` +
        `and so must the wrapper`,
    );
  }

  await buildCache(tool, {
    cacheRoot,
    recipe: RECIPE,
    goLine,
    keyInputs: [["versions.json", join(dir, "versions.json")], ...goModInputs("cluster-gateway", dir)],
    versions,
    targets: [{ name: "cluster-gateway", dir, pkg: `${GATEWAY}/cmd/apiserver`, ldflags: "-s -w" }],
    force: flags.has("--force"),
    keepOld: 1,
    printBinDir: true,
    note: "a cold build takes about 5 CPU-minutes",
    heartbeatMs: 60_000,
    goBuildOptions: { nice: 19 },
  });
}

main().catch((err) => tool.die(err?.stack ?? String(err)));
