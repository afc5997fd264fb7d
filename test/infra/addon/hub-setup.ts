// Test helpers shared by the addon-manager and chart suites: install the ManagedProxyConfiguration
// CRD on the hub (the chart's own file, charts/cluster-proxy/crds, which a unit test keeps equal to
// what `cluster-proxy manifests crds` prints) and wait until it serves; list a managed cluster's
// namespaces from the lab through a proxy-server; wait for a cluster's ManagedClusterAddOn, with
// the proxy-agents' logs when it does not come.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { load } from "js-yaml";
import { MPC_API_VERSION, MPC_KIND, parseTunnelHealth, type Condition } from "@cluster-proxy/api";
import { type KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "@cluster-proxy/addon-manager";
import { repoRoot, stateDir } from "../env/config.js";
import { waitFor } from "../env/exec.js";
import type { TestEnv } from "../env/fixture.js";
import { errorMessage } from "@cluster-proxy/errors";

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

/** The image the suites' proxy-servers and agents name (the process kubelet runs this checkout's CLI for it). */
export const DEV_IMAGE = "quay.io/open-cluster-management/cluster-proxy:dev";

/** What differs between the suites' ManagedProxyConfigurations. */
export interface MpcBodyOptions {
  name: string;
  /** The proxy-servers' namespace (absent: the CRD's default). */
  namespace?: string;
  /** `spec.proxyServer.entrypoint`. */
  entrypoint: Record<string, unknown>;
  /** `spec.proxyServer.replicas` (default 1). */
  serverReplicas?: number;
  /** `spec.proxyAgent.replicas` (absent: the CRD's default). */
  agentReplicas?: number;
  /** `spec.authentication` (default `{}`). */
  authentication?: Record<string, unknown>;
}

/** A ManagedProxyConfiguration body running {@link DEV_IMAGE}, as the suites apply it. */
export function mpcBody(o: MpcBodyOptions): KubeObject & { spec: Record<string, unknown> } {
  return {
    apiVersion: MPC_API_VERSION,
    kind: MPC_KIND,
    metadata: { name: o.name },
    spec: {
      proxyServer: {
        image: DEV_IMAGE,
        replicas: o.serverReplicas ?? 1,
        ...(o.namespace === undefined ? {} : { namespace: o.namespace }),
        entrypoint: o.entrypoint,
      },
      proxyAgent: { image: DEV_IMAGE, ...(o.agentReplicas === undefined ? {} : { replicas: o.agentReplicas }) },
      authentication: o.authentication ?? {},
    },
  };
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
      join(repoRoot, "test", "infra", "addon", "cluster-probe.ts"),
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

/** The condition `type` of an object's status. */
export const cond = (o: { status?: { conditions?: Condition[] } } | undefined, type: string): Condition | undefined =>
  o?.status?.conditions?.find((c) => c.type === type);

/**
 * Available, through all `replicas` proxy-servers: Available turns True with the first replica that
 * reaches the cluster, and a probe through one particular replica's door needs them all.
 */
export const availableThroughAll = (m: { status?: { conditions?: Condition[] } }, replicas: number): boolean =>
  cond(m, "Available")?.status === "True" && parseTunnelHealth(cond(m, "Available")?.message)?.reachable === replicas;

/** The last `lines` lines of each proxy-agent's log in `cluster` (the process kubelet's files). */
export function agentLogs(cluster: string, agentNamespace: string, lines: number): string {
  const base = join(stateDir, "data", cluster, "kubelet");
  try {
    return readdirSync(base)
      .filter((d) => d.startsWith(`${agentNamespace}_cluster-proxy-proxy-agent-`))
      .map((d) => {
        let text: string;
        try {
          text = readFileSync(join(base, d, "proxy-agent.log"), "utf8")
            .split("\n")
            .slice(-lines)
            .join("\n");
        } catch {
          text = "(no log)";
        }
        return `--- ${cluster} ${d}\n${text}`;
      })
      .join("\n");
  } catch {
    return `(no pods in ${base})`;
  }
}

/**
 * Waits until `cluster`'s ManagedClusterAddOn `name` satisfies `ok` (polled every `everyMs`) and
 * returns it; on a timeout the error carries its last status and what `diagnose` adds (the
 * manager's and the agents' last log lines).
 */
export async function waitForAddon<M extends KubeObject & { status?: unknown }>(
  hub: KubeApi,
  name: string,
  cluster: string,
  what: string,
  ok: (m: M) => boolean,
  o: { timeoutMs: number; everyMs: number; diagnose: () => string },
): Promise<M> {
  let last: M | undefined;
  try {
    return await waitFor(
      `${cluster}: ${what}`,
      o.timeoutMs,
      async () => {
        last = await hub.tryGet<M>(Resources.managedClusterAddOn, name, cluster);
        return last && ok(last) ? last : undefined;
      },
      o.everyMs,
    );
  } catch (err) {
    throw new Error(`${errorMessage(err)}\nlast status: ${JSON.stringify(last?.status)}\n${o.diagnose()}`, {
      cause: err,
    });
  }
}

/**
 * Deletes every CSR of the addon on the hub. OCM's registration agent stops requesting certificates
 * for a cluster while 10 CSRs of the addon exist (kube-controller-manager removes issued ones only
 * after an hour): earlier runs against the same environment must not count.
 */
export async function deleteAddonCsrs(hub: KubeApi): Promise<void> {
  const csrs = await hub.list(Resources.certificateSigningRequest, {
    labelSelector: "open-cluster-management.io/addon-name=cluster-proxy",
  });
  for (const c of csrs.items) await hub.delete(Resources.certificateSigningRequest, c.metadata.name);
}

/** Waits (up to 3 minutes) until the namespaces an earlier run left are gone. */
export async function waitForNamespacesGone(hub: KubeApi, namespaces: readonly string[]): Promise<void> {
  for (const ns of namespaces)
    await waitFor(
      `namespace ${ns} from an earlier run to be gone`,
      180_000,
      async () => !(await hub.tryGet(Resources.namespace, ns)),
      1000,
    );
}
