#!/usr/bin/env node
// Builds the ClusterProfile consumer test program (test/cluster-profile/consumer: the real
// sigs.k8s.io/cluster-inventory-api/pkg/credentials library, at the version OCM v1.2.1 requires)
// into a content-addressed, git-ignored cache, for test/cluster-profile.
//
//   node scripts/cluster-profile-consumer.mjs           build if needed; last stdout line = bin dir
//   node scripts/cluster-profile-consumer.mjs --force   rebuild even if the cache is warm
//
// Cache: .cache/cluster-profile-consumer/<key>/bin/consumer, <key> hashing versions.json, the
// module's go.mod/go.sum and .go sources, `go version` and this recipe. The shared machinery
// (Go check, key, build, atomic install, signals, pruning) is scripts/go-build-cache.mjs.

import { readdirSync } from "node:fs";
import { join } from "node:path";
import { buildCache, createTool, goModInputs } from "./go-build-cache.mjs";

// Bump when the build commands change, to invalidate old caches.
const RECIPE = "cluster-profile-consumer-recipe-1";

const tool = createTool(import.meta.url);
const baseDir = join(tool.repoRoot, "test", "cluster-profile");
const consumerDir = join(baseDir, "consumer");
const ocmDir = join(tool.repoRoot, "test", "infra", "k8s", "ocm");
const VERSIONS = "test/cluster-profile/versions.json";
const INVENTORY = "sigs.k8s.io/cluster-inventory-api";

async function main() {
  const flags = tool.parseArgs(["--force"]);
  const versions = JSON.parse(tool.readText(join(baseDir, "versions.json")));
  const goLine = tool.checkGo({
    required: versions.go,
    versionsFile: VERSIONS,
    purpose: "build the ClusterProfile consumer test program",
  });
  // The consumer uses the library at exactly the version the OCM v1.2.1 wrapper requires.
  tool.checkPins(
    [
      [consumerDir, INVENTORY, versions["cluster-inventory-api"]],
      [ocmDir, INVENTORY, versions["cluster-inventory-api"]],
    ],
    { versionsFile: VERSIONS, hint: "it must be the version OCM requires (test/infra/k8s/ocm/go.mod)" },
  );
  const sources = readdirSync(consumerDir)
    .filter((n) => n.endsWith(".go"))
    .sort();
  await buildCache(tool, {
    cacheRoot: join(tool.repoRoot, ".cache", "cluster-profile-consumer"),
    recipe: RECIPE,
    goLine,
    keyInputs: [
      ["versions.json", join(baseDir, "versions.json")],
      ...goModInputs("consumer", consumerDir),
      ...sources.map((f) => [`consumer/${f}`, join(consumerDir, f)]),
    ],
    versions,
    targets: [{ name: "consumer", dir: consumerDir, pkg: "." }],
    force: flags.has("--force"),
    keepOld: 1,
    printBinDir: true,
  });
}

main().catch((err) => tool.die(err?.stack ?? String(err)));
