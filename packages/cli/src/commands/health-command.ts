/**
 * `cluster-proxy health`: for each ManagedCluster, is the addon installed, does the manager report
 * it Available, and does a probe through the tunnel reach its kube-apiserver (TLS verified against
 * the ManagedCluster's CA)? Exit status 1 when a cluster with the addon is not healthy, or a cluster
 * named with --cluster does not have it.
 */
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Duplex } from "node:stream";
import type { Command } from "commander";
import {
  ADDON_NAME,
  ADDON_NAME_LABEL,
  ConfigError,
  GRPC_DOOR_PORT,
  SERVER_CA_AGENT_CA_KEY,
  SERVER_CA_SECRET,
  parseTunnelHealth,
  type Condition,
  HubResources,
} from "@cluster-proxy/api";
import type { KubeObject } from "@cluster-proxy/kube";
import { CommandFailure, type CliContext } from "../cli-context.js";
import {
  clusterCa,
  connectHub,
  hubError,
  openProxyRoute,
  proxyCredentials,
  type Hub,
  type HubFlags,
  type ManagedClusterObject,
} from "../hub/hub-access.js";
import { healthOptionsSchema, type HealthOptions } from "../hub/hub-options.js";
import {
  localCredentials,
  localEndpoint,
  requireConfiguredHub,
  selectLocalHub,
  type LocalHubProfile,
} from "../up/local-hub.js";
import {
  mapLimited,
  probeApiserver,
  probeGatewayEndpoint,
  type ProbeOutcome,
  type TunnelDialer,
} from "../hub/health-probe.js";
import { registerOptionCommand } from "./option-command.js";
import {
  addonReasons,
  expiryFromRotatedMessage,
  formatHealth,
  healthExitCode,
  type ClusterHealth,
} from "../hub/health-report.js";
import { errorMessage } from "@cluster-proxy/errors";

const EXAMPLE = `
Examples:
  cluster-proxy health --kubeconfig hub.kubeconfig
  cluster-proxy health --kubeconfig hub.kubeconfig --via=apiserver   # through the hub kube-apiserver, as clusteradm
  cluster-proxy health --cluster mc1 -o wide
  cluster-proxy health -o json | jq '.items[] | select(.healthy | not) | .cluster'
  cluster-proxy health   # the local hub of "cluster-proxy up" (run where it runs): its demo clusters

The probe dials <cluster>:443 through the proxy-server's gRPC client door (directly, or through a
port-forward of the hub kube-apiserver to a Ready proxy-server pod: --via, the VIA column of
-o wide) and speaks TLS to the
cluster's kube-apiserver, verified against spec.managedClusterClientConfigs[].caBundle of its
ManagedCluster, then GETs --probe-path anonymously: no hub credential reaches a managed cluster.
With -o wide, json or yaml, GATEWAY probes each agent's gateway endpoint the same way (dial
gateway.cluster-proxy.invalid.<cluster>:443, a TLS handshake without a client certificate, the
agent's certificate verified against the agent CA bundle of Secret proxy-server-ca and checked
for the cluster's name); it says nothing about the gateway's own pods and does not change the
exit status.
Exit status: 0 when every cluster with the addon is healthy, 1 otherwise. A cluster without the
addon is listed as not installed (INSTALLED False) and fails the command only when named with --cluster.
`;

interface Mca extends KubeObject {
  status?: { conditions?: Condition[] };
}

/** Register `health` on `program`. */
export function registerHealthCommand(program: Command, ctx: CliContext, setExitCode: (code: number) => void): void {
  registerOptionCommand(program, ctx, {
    name: "health",
    summary: "check the addon on every managed cluster (clusteradm proxy health)",
    description:
      "Show, per managed cluster, whether the cluster-proxy addon is installed and Available and whether a probe through the tunnel reaches its kube-apiserver with TLS verified. The columns CLUSTER NAME, INSTALLED, AVAILABLE, PROBED HEALTH and LATENCY are clusteradm's.",
    example: EXAMPLE,
    schema: healthOptionsSchema,
    run: async (flags) => {
      const local = selectLocalHub(flags, ctx.cwd);
      const rows = local
        ? await collectLocalHealth(local, flags)
        : await collectHealth(await requireConfiguredHub(() => connectHub(flags, ctx.env), flags, ctx.env)(), flags);
      ctx.stdout(await formatHealth(rows, flags.output));
      setExitCode(healthExitCode(rows, flags.cluster));
    },
  });
}

/** The newest agent certificate's expiry per cluster, from the addon's CertificateSigningRequests. */
async function agentCertificateExpiries(hub: Hub): Promise<Map<string, string>> {
  const { KubeResources } = await import("@cluster-proxy/kube");
  const out = new Map<string, string>();
  let items: (KubeObject & { status?: { certificate?: string } })[];
  try {
    items = (
      await hub.api.list(KubeResources.certificateSigningRequest, {
        labelSelector: `${ADDON_NAME_LABEL}=${ADDON_NAME}`,
      })
    ).items;
  } catch {
    return out; // not allowed to list CSRs: the column shows "-"
  }
  for (const csr of items) {
    const cluster = csr.metadata.labels?.["open-cluster-management.io/cluster-name"];
    if (!cluster || !csr.status?.certificate) continue;
    try {
      const expiry = new Date(new X509Certificate(Buffer.from(csr.status.certificate, "base64")).validTo).toISOString();
      if (!out.has(cluster) || out.get(cluster)! < expiry) out.set(cluster, expiry.replace(/\.000Z$/, "Z"));
    } catch {
      // an unreadable certificate is skipped
    }
  }
  return out;
}

async function collectHealth(hub: Hub, flags: HealthOptions): Promise<ClusterHealth[]> {
  const { timeout: timeoutMs, parallel } = flags;

  let clusters: ManagedClusterObject[];
  let addons: Mca[];
  try {
    clusters = (await hub.api.list(HubResources.managedCluster)).items;
    addons = (await hub.api.list(HubResources.managedClusterAddOn)).items.filter((a) => a.metadata.name === ADDON_NAME);
  } catch (err) {
    throw hubError(err, "listing ManagedClusters and ManagedClusterAddOns");
  }
  if (flags.cluster.length) {
    const known = new Set(clusters.map((c) => c.metadata.name));
    const unknown = flags.cluster.filter((c) => !known.has(c));
    if (unknown.length) throw new CommandFailure(`--cluster: no ManagedCluster named ${unknown.join(", ")}`);
    clusters = clusters.filter((c) => flags.cluster.includes(c.metadata.name));
  }
  clusters.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const expiries = await agentCertificateExpiries(hub);
  const agentCa = flags.output === "table" ? undefined : await agentCaBundle(hub);
  const installedNames = new Set(addons.map((a) => a.metadata.namespace));
  const dial = await tunnelDialer(
    hub,
    flags,
    clusters.some((c) => installedNames.has(c.metadata.name)),
  );
  try {
    return await mapLimited(clusters, parallel, async (mc) => {
      const name = mc.metadata.name;
      const mca = addons.find((a) => a.metadata.namespace === name);
      const available = mca?.status?.conditions?.find((c) => c.type === "Available");
      const ca = clusterCa(mc);
      const probe: ProbeOutcome = !mca
        ? { ok: false, reason: "" }
        : !ca
          ? { ok: false, reason: "the ManagedCluster publishes no caBundle: TLS cannot be verified, not probed" }
          : await probeApiserver(dial!, name, ca, flags.probePath, timeoutMs);
      const reasons: string[] = [];
      if (!mca) reasons.push(`ManagedClusterAddOn ${ADDON_NAME} not found in namespace ${name}`);
      else reasons.push(...addonReasons(mca.status?.conditions));
      if (probe.reason) reasons.push(probe.reason);
      let gatewayEndpoint: boolean | undefined;
      if (mca && agentCa !== undefined) {
        const gw: ProbeOutcome =
          typeof agentCa === "string"
            ? { ok: false, reason: agentCa }
            : await probeGatewayEndpoint(dial!, name, agentCa, timeoutMs);
        gatewayEndpoint = gw.ok;
        if (gw.reason) reasons.push(gw.reason);
      }
      const servers = parseTunnelHealth(available?.message);
      return {
        ...(mca && dial ? { via: dial.via } : {}),
        cluster: name,
        installed: Boolean(mca),
        available: available?.status ?? "Unknown",
        probedHealth: probe.ok,
        latencyMs: probe.latencyMs,
        proxyServers: servers ? { connected: servers.reachable, total: servers.servers } : undefined,
        agentCertificateExpiry:
          expiries.get(name) ??
          expiryFromRotatedMessage(
            mca?.status?.conditions?.find((c) => c.type === "ClusterCertificateRotated" && c.status === "True")
              ?.message,
          ),
        gatewayEndpoint,
        reason: reasons.join("; "),
      };
    });
  } finally {
    await dial?.close();
  }
}

/**
 * The agent CA bundle that verifies the agents' gateway endpoints (`proxy-server-ca`'s
 * `agent-ca.crt`), or why there is none (a string: the GATEWAY column's reason).
 */
async function agentCaBundle(hub: Hub): Promise<Buffer | string> {
  const { KubeResources } = await import("@cluster-proxy/kube");
  const ns = hub.mpc.spec.proxyServer.namespace;
  try {
    const secret = await hub.api.tryGet<KubeObject & { data?: Record<string, string> }>(
      KubeResources.secret,
      SERVER_CA_SECRET,
      ns,
    );
    const b64 = secret?.data?.[SERVER_CA_AGENT_CA_KEY];
    return b64
      ? Buffer.from(b64, "base64")
      : `gateway endpoint not probed: Secret ${ns}/${SERVER_CA_SECRET} has no ${SERVER_CA_AGENT_CA_KEY} (an addon manager without the gateway)`;
  } catch (err) {
    return `gateway endpoint not probed: reading Secret ${ns}/${SERVER_CA_SECRET}: ${errorMessage(err)}`;
  }
}

/**
 * A dialer through the proxy-server's gRPC door (directly, or through the hub kube-apiserver as
 * --via says), or undefined when nothing will be probed.
 */
async function tunnelDialer(
  hub: Hub,
  flags: HubFlags,
  needed: boolean,
): Promise<(TunnelDialer & { close(): Promise<void>; via: "apiserver" | "direct" }) | undefined> {
  if (!needed) return undefined;
  const get = (): Promise<Hub> => Promise.resolve(hub);
  const creds = await proxyCredentials(get, flags);
  const route = await openProxyRoute(get, flags, GRPC_DOOR_PORT);
  const { TunnelClient } = await import("@cluster-proxy/client");
  const client = new TunnelClient({ proxy: { ...route.endpoint, ...creds } });
  const dial = (address: string, signal: AbortSignal): Promise<Duplex> => client.dial(address, { signal });
  return Object.assign(dial, {
    via: route.via,
    close: async () => {
      await client.close();
      await route.close();
    },
  });
}

/**
 * The rows for the local hub of `cluster-proxy up`: every demo cluster is installed; AVAILABLE is
 * whether the proxy-server has an agent stream for it (its `cluster_proxy_server_backends`
 * metric), and the probe reaches its stand-in kube-apiserver through the gRPC door.
 */
async function collectLocalHealth(profile: LocalHubProfile, flags: HealthOptions): Promise<ClusterHealth[]> {
  const { timeout: timeoutMs, parallel } = flags;
  const unknown = flags.cluster.filter((c) => !profile.clusters.includes(c));
  if (unknown.length)
    throw new ConfigError(
      `--cluster: the local hub has no cluster named ${unknown.join(", ")} (its clusters: ${profile.clusters.join(", ")})`,
    );
  const clusters = [...profile.clusters]
    .filter((c) => !flags.cluster.length || flags.cluster.includes(c))
    .sort((a, b) => a.localeCompare(b));
  const backends = await localBackends(profile, timeoutMs);
  const ca = readFileSync(profile.files.apiserverCa);
  const { TunnelClient } = await import("@cluster-proxy/client");
  const client = new TunnelClient({ proxy: { ...localEndpoint(profile, "grpc"), ...localCredentials(profile) } });
  const dial: TunnelDialer = (address, signal) => client.dial(address, { signal });
  try {
    return await mapLimited(clusters, parallel, async (cluster) => {
      const connected = backends.counts.get(cluster) ?? 0;
      const available = backends.error ? "Unknown" : connected > 0 ? "True" : "False";
      const probe = await probeApiserver(dial, cluster, ca, flags.probePath, timeoutMs);
      const reasons: string[] = [];
      if (backends.error) reasons.push(backends.error);
      else if (connected === 0) reasons.push("no agent of this cluster is connected to the local hub");
      if (probe.reason) reasons.push(probe.reason);
      return {
        cluster,
        installed: true,
        available,
        probedHealth: probe.ok,
        latencyMs: probe.latencyMs,
        reason: reasons.join("; "),
      };
    });
  } finally {
    await client.close();
  }
}

/** Agent streams per cluster, from the local proxy-server's /metrics (health port). */
async function localBackends(
  profile: LocalHubProfile,
  timeoutMs: number,
): Promise<{ counts: Map<string, number>; error?: string }> {
  const url = `http://${profile.host}:${profile.ports.health}/metrics`;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const text = await res.text();
    const counts = new Map<string, number>();
    for (const m of text.matchAll(/^cluster_proxy_server_backends\{identifier="([^"]+)"\} (\d+)/gm))
      counts.set(m[1]!, Number(m[2]));
    return { counts };
  } catch (err) {
    return {
      counts: new Map(),
      error: `the local hub's health port ${url} did not answer (${errorMessage(err)})`,
    };
  }
}
