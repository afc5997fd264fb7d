/**
 * The addon's health message as the manager writes it into `Available` and `cluster-proxy health`
 * reads it back ({@link parseTunnelHealth}, {@link parseTunnelReplicas}): one format, both sides.
 * Design: docs/design/addon-manager.md#health-available-from-tunnel-probes-through-the-proxy-server-replicas
 */

/** Reasons of the `Available` condition the manager writes. */
export const TunnelHealthReason = {
  /** A dial through at least one proxy-server replica reached the cluster (the message counts them). */
  available: "ProxyAgentAvailable",
  /** No replica could reach the cluster (the message names each and why, and what the agents report). */
  unavailable: "ProxyAgentUnavailable",
  /** No proxy-server replica to probe through yet. */
  noServer: "NoProxyServer",
  /**
   * No replica has a tunnel now, but the proxy-servers changed (scaled, rolled) since one had,
   * moments ago: the agents are moving to the new replicas. Available stays True for a grace time.
   */
  changing: "ProxyServersChanging",
  /**
   * No replica could reach the cluster and OCM's registration agent reports that it does not get
   * the agent's certificate (`ClusterCertificateRotated=False`, e.g. too many CSRs on the hub):
   * agent pods without their certificate Secret cannot start. The message has OCM's words.
   */
  certificateNotIssued: "AgentCertificateNotIssued",
  /**
   * No replica could reach the cluster and no certificate was issued to the agent yet (no
   * `ClusterCertificateRotated` condition): its pods wait for their certificate Secret.
   */
  certificatePending: "AgentCertificatePending",
} as const;

/** One proxy-server replica's last probe of a cluster. */
export interface ReplicaProbe {
  /** The replica (pod name). */
  server: string;
  /** Its address as probed (pod IP). */
  address: string;
  ok: boolean;
  /** Why it failed (when not ok). */
  error?: string;
  /** Round trip of the successful probe, in milliseconds. */
  latencyMs?: number;
}

const HEAD = /^tunnel works through (\d+) of (\d+) proxy-servers?/;
const REACHED = /^ \(([^)]*)\)/;
const FAILING = /^([a-z0-9][a-z0-9.-]*) \([^)]*\): /;

/** The `Available` message for a cluster's probes through every replica. */
export function formatTunnelHealth(probes: readonly ReplicaProbe[]): string {
  const ok = probes.filter((p) => p.ok).map((p) => p.server);
  const reached = ok.length ? ` (${ok.join(", ")})` : "";
  const head = `tunnel works through ${ok.length} of ${probes.length} proxy-server${probes.length === 1 ? "" : "s"}${reached}`;
  const failed = probes.filter((p) => !p.ok).map((p) => `${p.server} (${p.address}): ${p.error ?? "failed"}`);
  return failed.length ? `${head}; ${failed.join("; ")}` : head;
}

/** Reads back "<n> of <m>" from a message written by {@link formatTunnelHealth}; undefined for any other text. */
export function parseTunnelHealth(message: string | undefined): { reachable: number; servers: number } | undefined {
  const m = HEAD.exec(message ?? "");
  return m ? { reachable: Number(m[1]), servers: Number(m[2]) } : undefined;
}

/**
 * Reads back the replicas by name from a message written by {@link formatTunnelHealth}: those the
 * tunnel works through (undefined when the message does not name them: a manager older than the
 * names) and those that failed; undefined for any other text.
 */
export function parseTunnelReplicas(
  message: string | undefined,
): { reached: string[] | undefined; failing: string[] } | undefined {
  const m = HEAD.exec(message ?? "");
  if (!m) return undefined;
  const rest = message!.slice(m[0].length);
  const named = REACHED.exec(rest);
  const reached = named ? named[1]!.split(", ").filter(Boolean) : Number(m[1]) === 0 ? [] : undefined;
  const failing = rest
    .split("; ")
    .slice(1)
    .flatMap((part) => FAILING.exec(part)?.[1] ?? []);
  return { reached, failing };
}

/**
 * The condition each proxy-agent writes into its own Deployment's status (its connection to the
 * proxy-servers, with its last error), which the agent's ManifestWork reads back as status
 * feedback so the hub can say why agents cannot connect.
 */
export const AGENT_CONNECTION_CONDITION = "ProxyAgentConnected";

/** Reasons of {@link AGENT_CONNECTION_CONDITION}. */
export const AgentConnectionReason = {
  /** Connected to every proxy-server the servers announced. */
  connected: "Connected",
  /** Connected to some, not all, proxy-servers (the message carries the last error). */
  partial: "PartiallyConnected",
  /** Connected to no proxy-server (the message carries the last error). */
  disconnected: "NotConnected",
} as const;

/** The longest message an agent writes into {@link AGENT_CONNECTION_CONDITION}. */
export const AGENT_CONNECTION_MESSAGE_MAX = 400;
