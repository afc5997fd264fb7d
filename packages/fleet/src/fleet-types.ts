/**
 * The JSON the fleet page reads (docs/design/fleet-view.md). The page's bundle imports these
 * types too, so the server and the page cannot disagree on a field.
 */

/** One cluster's row of the fleet table. */
export interface FleetRow {
  cluster: string;
  /** The addon is installed for the cluster (a ManagedClusterAddOn exists; always true for up). */
  installed: boolean;
  /** "True" when the cluster is reachable through the hub now. */
  available: "True" | "False" | "Unknown";
  /** Round trip of the last probe through the tunnel, ms; null when it failed or none ran yet. */
  latencyMs: number | null;
  /** Agents connected per proxy-server replica (replica id to count); {} when none. */
  agentsByServer: Record<string, number>;
  /** Proxy-server replicas expected (the count the agents should reach); null when unknown. */
  serversExpected: number | null;
  /** Expiry of the cluster's agent certificate (ISO 8601); null when unknown. */
  agentCertExpiry: string | null;
  /** When `installed`, `available` or `agentsByServer` last changed (ISO 8601). */
  lastChange: string;
  /** Why it is not available (empty when it is). */
  reason: string;
}

/** What `GET /-/fleet/api/clusters` answers and the `snapshot` event carries. */
export interface FleetSnapshot {
  /** ISO 8601. */
  generated: string;
  /** The clusters the viewer may see, sorted by name. */
  clusters: FleetRow[];
  /** The viewer may open the audit view (of at least one cluster it sees). */
  audit: boolean;
}

/** One 5 s bucket of a cluster's traffic. */
export interface TrafficPoint {
  /** Start of the bucket, Unix ms. */
  t: number;
  requests: number;
  /** Requests answered with 500 or more, or that failed without an answer. */
  errors: number;
  /** Bytes from the callers. */
  bytesIn: number;
  /** Bytes to the callers. */
  bytesOut: number;
}

/** One request in a cluster's audit view. */
export interface AuditEntry {
  time: string;
  user: string;
  verb: string;
  /** e.g. "namespaces", "pods/exec", "service https:web.default:443"; "" for non-resource paths. */
  resource: string;
  /** The path, for non-resource requests. */
  path?: string;
  status: number;
  durationMs: number;
  denied: boolean;
  reason?: string;
}

/** What `GET /-/fleet/api/clusters/<cluster>` answers and the `detail` event carries. */
export interface ClusterDetail {
  row: FleetRow;
  /** {@link SERIES_POINTS} points, oldest first, the current bucket last. */
  series: TrafficPoint[];
  openStreams: number;
  /** Newest first, at most {@link AUDIT_ENTRIES}; null when the viewer may not see the audit view. */
  audit: AuditEntry[] | null;
}

/** Width of a traffic bucket, ms. */
export const BUCKET_MS = 5_000;
/** Buckets kept: 15 minutes. */
export const SERIES_POINTS = 180;
/** Audit records kept per cluster. */
export const AUDIT_ENTRIES = 200;
/** Where the fleet view lives on a server (a cluster name cannot be `-`). */
export const FLEET_PATH = "/-/fleet/";
