// Test helpers shared by the addon-manager and chart suites: install the ManagedProxyConfiguration
// CRD on the hub (the chart's own file, charts/cluster-proxy/crds, which a unit test keeps equal to
// what `cluster-proxy manifests crds` prints) and wait until it serves; list a managed cluster's
// namespaces from the lab through a proxy-server.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { load } from "js-yaml";
import type { Condition } from "@cluster-proxy/api";
import type { KubeApi, KubeObject } from "@cluster-proxy/addon-manager";
import { repoRoot } from "../env/config.js";
import { waitFor } from "../env/exec.js";
import type { TestEnv } from "../env/fixture.js";

const CRD = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  plural: "customresourcedefinitions",
  namespaced: false,
};

export async function installCrd(api: KubeApi): Promise<void> {
  const crd = load(
    readFileSync(join(repoRoot, "charts", "cluster-proxy", "crds", "managedproxyconfigurations.yaml"), "utf8"),
  ) as KubeObject;
  await api.apply(CRD, crd);
  await waitFor("the CRD to be Established", 60_000, async () => {
    const live = (await api.get(CRD, crd.metadata.name)) as { status?: { conditions?: Condition[] } };
    return live.status?.conditions?.some((c) => c.type === "Established" && c.status === "True");
  });
}

export interface ClusterProbeResult {
  ok?: boolean;
  namespaces?: string[];
  error?: string;
}

/**
 * Runs cluster-probe.ts in the lab namespace: lists `cluster`'s namespaces through the proxy-server
 * client door `door` (host:port, serving name `servername`, proxy-client files in `certDir`) with
 * TLS to the cluster verified against `clusterCaFile`; `target` instead of `<cluster>:443`, and
 * `goClient` for the Go konnectivity-client's tunnel instead of our SDK.
 */
export function probeClusterFromLab(
  env: TestEnv,
  o: {
    door: string;
    servername: string;
    certDir: string;
    cluster: "mc1" | "mc2";
    clusterCaFile: string;
    target?: string;
    goClient?: string;
  },
): ClusterProbeResult {
  const out = env.exec(
    "lab",
    "env",
    [
      ...(o.goClient ? [`GO_CLIENT=${o.goClient}`] : []),
      process.execPath,
      "--conditions=source",
      "--import",
      "tsx",
      join(repoRoot, "test", "addon-manager", "cluster-probe.ts"),
      o.door,
      o.servername,
      o.certDir,
      o.cluster,
      o.clusterCaFile,
      env.kubeconfigPath(o.cluster),
      ...(o.target ? [o.target] : []),
    ],
    { timeoutMs: 60_000, allowFail: true },
  ).stdout;
  return JSON.parse(out.trim().split("\n").at(-1) || "{}") as ClusterProbeResult;
}
