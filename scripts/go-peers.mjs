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
// never leaves a half cache. See docs/testing/go-peers.md; the shared machinery (Go
// check, cache key, build, install, signals, pruning) is scripts/go-build-cache.mjs.

import { readdirSync } from "node:fs";
import { join } from "node:path";
import { buildCache, createTool, goModInputs } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "go-peers-recipe-1";

const tool = createTool(import.meta.url);
const peersDir = join(tool.repoRoot, "test", "infra", "go-peers");
const knpDir = join(peersDir, "knp");
const clientDir = join(peersDir, "client");
const cacheRoot = join(tool.repoRoot, ".cache", "go-peers");
const VERSIONS = "test/infra/go-peers/versions.json";

const KNP = "sigs.k8s.io/apiserver-network-proxy";
const TARGETS = [
  { name: "proxy-server", dir: knpDir, pkg: `${KNP}/cmd/server` },
  { name: "proxy-agent", dir: knpDir, pkg: `${KNP}/cmd/agent` },
  { name: "proxy-test-client", dir: knpDir, pkg: `${KNP}/cmd/test-client` },
  { name: "http-test-server", dir: knpDir, pkg: `${KNP}/cmd/test-server` },
  { name: "konnectivity-go-client", dir: clientDir, pkg: "." },
];

function keyInputs() {
  const clientSources = readdirSync(clientDir)
    .filter((n) => n.endsWith(".go"))
    .sort();
  return [
    ["versions.json", join(peersDir, "versions.json")],
    ...goModInputs("knp", knpDir),
    ...goModInputs("client", clientDir),
    ...clientSources.map((f) => [`client/${f}`, join(clientDir, f)]),
  ];
}

async function main() {
  const flags = tool.parseArgs(["--force"]);
  const versions = JSON.parse(tool.readText(join(peersDir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build the konnectivity test peers",
    requiredBy: `apiserver-network-proxy's go.mod; pinned in ${VERSIONS}`,
  });
  // versions.json must agree with what the go.mod files actually require.
  tool.checkPins(
    [
      [knpDir, KNP, versions["apiserver-network-proxy"]],
      [knpDir, `${KNP}/konnectivity-client`, versions["konnectivity-client"]],
      [clientDir, `${KNP}/konnectivity-client`, versions["konnectivity-client"]],
    ],
    { versionsFile: VERSIONS },
  );

  await buildCache(tool, {
    cacheRoot,
    recipe: RECIPE,
    goLine,
    keyInputs: keyInputs(),
    versions,
    targets: TARGETS,
    force: flags.has("--force"),
    keepOld: 2, // each key holds ~200 MB of binaries
    printBinDir: true,
    goBuildOptions: { tailLines: Infinity },
  });
}

main().catch((err) => tool.die(err?.stack ?? String(err)));
