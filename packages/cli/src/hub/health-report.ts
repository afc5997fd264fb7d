/**
 * The rows of `cluster-proxy health` and their output forms. The table's first five columns are
 * `clusteradm proxy health`'s, in its order and spelling (CLUSTER NAME, INSTALLED, AVAILABLE,
 * PROBED HEALTH, LATENCY), so scripts that parse them keep working; what an operator needs next
 * follows: REASON (why something is false), and with `-o wide` PROXY-SERVERS, AGENT CERT EXPIRY,
 * GATEWAY (the agent's gateway endpoint answered through the tunnel with the cluster's certificate)
 * and VIA (how the probe reached the proxy-servers: direct, or apiserver through a port-forward).
 */
/** One cluster's health as `cluster-proxy health` reports it. */
export interface ClusterHealth {
  cluster: string;
  /** A ManagedClusterAddOn `cluster-proxy` exists in the cluster's namespace. */
  installed: boolean;
  /** Its `Available` condition ("True", "False" or "Unknown"; "Unknown" without one). */
  available: "True" | "False" | "Unknown";
  /** The probe through the tunnel reached the cluster's kube-apiserver with TLS verified. */
  probedHealth: boolean;
  /** Round trip of the probe (TLS handshake and /healthz), in milliseconds; undefined when it failed. */
  latencyMs?: number;
  /** Proxy-servers the agent's tunnel works through, from the `Available` message; undefined when not reported. */
  proxyServers?: { connected: number; total: number };
  /** Expiry of the newest agent certificate issued for the cluster (ISO 8601), if any. */
  agentCertificateExpiry?: string;
  /**
   * The agent's gateway endpoint answered through the tunnel with the cluster's certificate
   * (`-o wide`, json, yaml); undefined when not probed. It does not count towards `healthy`.
   */
  gatewayEndpoint?: boolean;
  /**
   * How the probe reached the proxy-servers: `direct` (their Service or a LoadBalancer) or
   * `apiserver` (a port-forward through the hub kube-apiserver); undefined when not probed.
   */
  via?: "apiserver" | "direct";
  /** Why something is false (empty when healthy). */
  reason: string;
}

/** A condition as the addon's status carries it (the fields `addonReasons` reads). */
interface AddonCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

/**
 * The REASON words from a ManagedClusterAddOn's conditions: `Available` when not True (its
 * message says why, the agent's certificate included), and OCM's `ClusterCertificateRotated=False`
 * (the registration agent no longer requests the agent's certificate, e.g. too many CSRs) unless
 * the Available message already carries it: shown even while Available is True, because an agent
 * whose certificate cannot be renewed stops at its expiry.
 */
export function addonReasons(conditions: readonly AddonCondition[] | undefined): string[] {
  const find = (type: string): AddonCondition | undefined => conditions?.find((c) => c.type === type);
  const available = find("Available");
  const rotated = find("ClusterCertificateRotated");
  const reasons: string[] = [];
  if (!available) reasons.push("no Available condition yet");
  else if (available.status !== "True")
    reasons.push(`Available=${available.status} (${available.reason ?? ""}): ${available.message ?? ""}`);
  if (
    rotated?.status === "False" &&
    !(available?.status !== "True" && available?.message?.includes("ClusterCertificateRotated=False"))
  )
    reasons.push(`ClusterCertificateRotated=False (${rotated.reason ?? ""}): ${rotated.message ?? ""}`);
  return reasons;
}

/**
 * The end of the certificate OCM's registration agent last wrote for the addon, from its
 * `ClusterCertificateRotated=True` message ("client certificate rotated starting from
 * 2026-05-01 10:00:00 +0000 UTC to 2026-10-28 10:00:00 +0000 UTC", Go's time format), as ISO 8601;
 * undefined for any other text. The addon manager deletes issued CSRs after a grace period, so this
 * is where the expiry is read once they are gone.
 */
export function expiryFromRotatedMessage(message: string | undefined): string | undefined {
  const m = / to (\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(?:\.\d+)? ([+-])(\d{2})(\d{2})\b/.exec(message ?? "");
  if (!m) return undefined;
  const at = Date.parse(`${m[1]}T${m[2]}${m[3]}${m[4]}:${m[5]}`);
  return Number.isNaN(at) ? undefined : new Date(at).toISOString().replace(/\.000Z$/, "Z");
}

/** Output forms of `-o`. */
export const OUTPUT_FORMATS = ["table", "wide", "json", "yaml"] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/** A cluster is healthy when installed, Available and probed healthy. */
export function isHealthy(h: ClusterHealth): boolean {
  return h.installed && h.available === "True" && h.probedHealth;
}

/**
 * The exit status of `health`: 1 when a cluster with the addon is not healthy, or a cluster named
 * with `--cluster` does not have it; a cluster deliberately left without the addon is listed
 * (INSTALLED False) but does not fail the command.
 */
export function healthExitCode(rows: readonly ClusterHealth[], named: readonly string[] = []): 0 | 1 {
  const failing = rows.filter((h) => !isHealthy(h) && (h.installed || named.includes(h.cluster)));
  return failing.length === 0 ? 0 : 1;
}

const cap = (b: boolean): string => (b ? "True" : "False");

/** Latency as kubectl-style text ("12ms", "1.2s"), "-" when unknown. */
export function formatLatency(ms: number | undefined): string {
  if (ms === undefined) return "-";
  return ms < 1000 ? `${Math.round(ms)}ms` : `${(ms / 1000).toFixed(1)}s`;
}

/** Columns aligned with three spaces between them, like kubectl's tables. */
export function alignColumns(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!)))
        .join("   ")
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join("");
}

/** The table (`-o wide` adds PROXY-SERVERS, AGENT CERT EXPIRY, GATEWAY and VIA before REASON). */
export function formatTable(rows: readonly ClusterHealth[], wide: boolean): string {
  const head = ["CLUSTER NAME", "INSTALLED", "AVAILABLE", "PROBED HEALTH", "LATENCY"];
  const extra = wide ? ["PROXY-SERVERS", "AGENT CERT EXPIRY", "GATEWAY", "VIA"] : [];
  const lines = rows.map((h) => [
    h.cluster,
    cap(h.installed),
    h.available,
    cap(h.probedHealth),
    formatLatency(h.latencyMs),
    ...(wide
      ? [
          h.proxyServers ? `${h.proxyServers.connected}/${h.proxyServers.total}` : "-",
          h.agentCertificateExpiry ?? "-",
          h.gatewayEndpoint === undefined ? "-" : cap(h.gatewayEndpoint),
          h.via ?? "-",
        ]
      : []),
    h.reason || "-",
  ]);
  return alignColumns([[...head, ...extra, "REASON"], ...lines]);
}

/** The machine-readable document of `-o json` / `-o yaml`: fields that are unknown are null. */
export function healthDocument(rows: readonly ClusterHealth[]): {
  apiVersion: string;
  kind: string;
  items: Record<string, unknown>[];
} {
  return {
    apiVersion: "proxy.open-cluster-management.io/v1alpha1",
    kind: "ClusterProxyHealthList",
    items: rows.map((h) => ({
      cluster: h.cluster,
      installed: h.installed,
      available: h.available,
      probedHealth: h.probedHealth,
      healthy: isHealthy(h),
      latencyMs: h.latencyMs === undefined ? null : Math.round(h.latencyMs),
      proxyServers: h.proxyServers ?? null,
      agentCertificateExpiry: h.agentCertificateExpiry ?? null,
      gatewayEndpoint: h.gatewayEndpoint ?? null,
      via: h.via ?? null,
      reason: h.reason,
    })),
  };
}

/** Render `rows` in `format`. */
export async function formatHealth(rows: readonly ClusterHealth[], format: OutputFormat): Promise<string> {
  switch (format) {
    case "json":
      return `${JSON.stringify(healthDocument(rows), null, 2)}\n`;
    case "yaml": {
      const { dumpYaml } = await import("@kubernetes/client-node");
      return dumpYaml(healthDocument(rows));
    }
    default:
      return formatTable(rows, format === "wide");
  }
}
