// Test helper: the helm binary (scripts/helm-binary.mjs builds it, or finds it cached), a runner
// with helm's config, cache and data directories in a temp dir (never the caller's ~/.config/helm),
// and helm against the test environment's hub for the suites that install the chart there.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Condition } from "@cluster-proxy/api";
import type { KubeApi, KubeObject } from "@cluster-proxy/kube";
import { deleteAddonCsrs } from "./addon/hub-setup.js";
import { paths, repoRoot } from "./env/config.js";
import { type RunResult, waitFor } from "./env/exec.js";
import { docBlock, runAsOperator } from "./addon/readme-install.js";
import type { TestEnv } from "./env/fixture.js";

export const CHART = join(repoRoot, "charts", "cluster-proxy");
/** The release of the README's chart install, and its namespace. */
export const RELEASE = "cluster-proxy";
export const RELEASE_NAMESPACE = "open-cluster-management-addon";
/** The managed clusters' namespace of the agents the chart's manager installs. */
export const AGENT_NAMESPACE = "open-cluster-management-cluster-proxy";

/** helm with the hub's kubeconfig, run in the lab namespace (the environment's helm wrapper). */
export function hubHelm(
  env: TestEnv,
  args: string[],
  opts: { allowFail?: boolean; timeoutMs?: number } = {},
): RunResult {
  return env.exec("lab", paths.helm, [...args, "--kubeconfig", env.kubeconfigPath("hub")], {
    timeoutMs: opts.timeoutMs ?? 180_000,
    allowFail: opts.allowFail,
  });
}

/**
 * What an interrupted run left on the hub: the release (uninstalled, waiting for its objects) and
 * the addon's CSRs of earlier runs (OCM's registration agent stops requesting at 10 per cluster).
 */
/** The `Available` condition of the release's ManagedClusterAddOn in each cluster's namespace, read with the hub's kubectl. */
export function addonAvailability(env: TestEnv): Record<string, Condition | undefined> {
  const list = JSON.parse(env.kubectl("hub", ["get", "managedclusteraddon", "-A", "-o", "json"]).stdout) as {
    items: (KubeObject & { status?: { conditions?: Condition[] } })[];
  };
  return Object.fromEntries(
    list.items
      .filter((m) => m.metadata.name === RELEASE)
      .map((m) => [m.metadata.namespace!, m.status?.conditions?.find((c) => c.type === "Available")]),
  );
}

export async function removeLeftRelease(env: TestEnv, hub: KubeApi): Promise<void> {
  hubHelm(env, ["uninstall", "-n", RELEASE_NAMESPACE, RELEASE, "--wait", "--timeout", "120s"], { allowFail: true });
  await deleteAddonCsrs(hub);
}

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

/**
 * The README's bare chart install as the operator runs it (the `install-chart` block, with the
 * operator's `path`), then cluster-proxy Available on each of `clusters` within 300 s (the last
 * conditions seen are in the error).
 */
export async function readmeInstallAvailable(env: TestEnv, path: string, clusters: readonly string[]): Promise<void> {
  const r = await runAsOperator(env, path, docBlock("install-chart"), 600_000);
  if (r.status !== 0) throw new Error(`the README's install-chart block failed:\n${r.stdout}\n${r.stderr}`);
  let last: Record<string, Condition | undefined> = {};
  await waitFor(
    `cluster-proxy Available on ${clusters.join(" and ")}`,
    300_000,
    () => {
      last = addonAvailability(env);
      return clusters.every((c) => last[c]?.status === "True") || undefined;
    },
    1000,
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nlast: ${JSON.stringify(last)}`, { cause: err });
  });
}
