// Test helper: the helm binary (scripts/helm-binary.mjs builds it, or finds it cached) and a runner
// with helm's config, cache and data directories in a temp dir (never the caller's ~/.config/helm).
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "../env/config.js";

export const CHART = join(repoRoot, "charts", "cluster-proxy");

let cached: string | undefined;

/** Path of the built helm (a cold build needs the Go module proxy: scripts/test.sh prepares it). */
export function helmBinary(): string {
  cached ??= join(
    execFileSync(process.execPath, [join(repoRoot, "scripts", "helm-binary.mjs")], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      timeout: 30 * 60_000,
    })
      .trim()
      .split("\n")
      .pop()!,
    "helm",
  );
  return cached;
}

export interface HelmResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

const home = mkdtempSync(join(tmpdir(), "cp-helm-home-"));

/** Runs helm offline (lint, template): no cluster involved. */
export function helm(args: string[]): HelmResult {
  const res = spawnSync(helmBinary(), args, {
    encoding: "utf8",
    timeout: 120_000,
    env: {
      ...process.env,
      HELM_CONFIG_HOME: join(home, "config"),
      HELM_CACHE_HOME: join(home, "cache"),
      HELM_DATA_HOME: join(home, "data"),
      KUBECONFIG: "/dev/null",
    },
  });
  return { status: res.status, stdout: res.stdout, stderr: res.stderr };
}
