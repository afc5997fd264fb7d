/**
 * What the fleet page shows, kept in memory by the host (the gateway or `cluster-proxy up`): a row
 * per cluster, each cluster's traffic series, open streams and recent audit records. The host
 * feeds it; {@link FleetHttp} reads it and listens for changes.
 *
 * Memory is bounded by the clusters that have a row: traffic and audit records for a cluster
 * without one (a name a caller made up, a cluster being removed) are dropped.
 */
import { realClock, type Clock } from "@cluster-proxy/kit";
import { AUDIT_ENTRIES, type AuditEntry, type ClusterDetail, type FleetRow, type TrafficPoint } from "./fleet-types.js";
import { TrafficSeries, type TrafficDelta } from "./traffic-series.js";

/** A row as the host reports it; the model keeps `lastChange`. */
export type RowReport = Omit<FleetRow, "lastChange">;

/**
 * What changed: `row` (a row was added, changed or removed: snapshots are stale) or `detail` (a
 * cluster's traffic, streams or audit records: its detail is stale).
 */
export type FleetChange = { kind: "row"; cluster: string } | { kind: "detail"; cluster: string };

interface ClusterState {
  row: FleetRow;
  traffic: TrafficSeries;
  openStreams: number;
  /** Oldest first; the newest {@link AUDIT_ENTRIES}. */
  audit: AuditEntry[];
}

/** See the module comment. */
export class FleetModel {
  private readonly clusters = new Map<string, ClusterState>();
  private readonly listeners = new Set<(change: FleetChange) => void>();
  private readonly clock: Clock;

  /** `clock`: the time of changes and traffic (default the kit's `realClock`; its `now()` read as Unix ms). */
  constructor(options: { clock?: Clock } = {}) {
    this.clock = options.clock ?? realClock;
  }

  /**
   * Set a cluster's row (adding the cluster when new). `lastChange` moves when `installed`,
   * `available` or `agentsByServer` change; listeners hear of any difference. `since` (ISO 8601)
   * is the `lastChange` of a row new to the model when the host knows it (e.g. the `Available`
   * condition's last transition); default now.
   */
  setRow(report: RowReport, since?: string): void {
    const state = this.clusters.get(report.cluster);
    if (!state) {
      const row: FleetRow = { ...report, lastChange: since ?? new Date(this.clock.now()).toISOString() };
      this.clusters.set(report.cluster, { row, traffic: new TrafficSeries(), openStreams: 0, audit: [] });
      this.emit({ kind: "row", cluster: report.cluster });
      return;
    }
    const old = state.row;
    const moved =
      old.installed !== report.installed ||
      old.available !== report.available ||
      !sameCounts(old.agentsByServer, report.agentsByServer);
    const row: FleetRow = { ...report, lastChange: moved ? new Date(this.clock.now()).toISOString() : old.lastChange };
    if (sameRow(old, row)) return;
    state.row = row;
    this.emit({ kind: "row", cluster: report.cluster });
  }

  /** Forget a cluster (its row, traffic and audit records). */
  removeCluster(cluster: string): void {
    if (this.clusters.delete(cluster)) this.emit({ kind: "row", cluster });
  }

  /** Count traffic of `cluster` in the current bucket. */
  recordTraffic(cluster: string, delta: TrafficDelta): void {
    const state = this.clusters.get(cluster);
    if (!state) return;
    state.traffic.add(this.clock.now(), delta);
    this.emit({ kind: "detail", cluster });
  }

  /** Set how many streams of `cluster` are open now. */
  setOpenStreams(cluster: string, count: number): void {
    const state = this.clusters.get(cluster);
    if (!state || state.openStreams === count) return;
    state.openStreams = count;
    this.emit({ kind: "detail", cluster });
  }

  /** Add an audit record of `cluster` (the oldest beyond {@link AUDIT_ENTRIES} goes). */
  recordAudit(cluster: string, entry: AuditEntry): void {
    const state = this.clusters.get(cluster);
    if (!state) return;
    state.audit.push(entry);
    if (state.audit.length > AUDIT_ENTRIES) state.audit.splice(0, state.audit.length - AUDIT_ENTRIES);
    this.emit({ kind: "detail", cluster });
  }

  /** Whether `cluster` has a row. */
  has(cluster: string): boolean {
    return this.clusters.has(cluster);
  }

  /** The clusters with a row, sorted by name. */
  clusterNames(): string[] {
    return [...this.clusters.keys()].sort();
  }

  /** The row of `cluster`. */
  row(cluster: string): FleetRow | undefined {
    const row = this.clusters.get(cluster)?.row;
    return row && { ...row, agentsByServer: { ...row.agentsByServer } };
  }

  /** The traffic series of `cluster` (oldest first). */
  series(cluster: string): TrafficPoint[] | undefined {
    return this.clusters.get(cluster)?.traffic.points(this.clock.now());
  }

  /** The detail of `cluster`, with its audit records when `withAudit`. */
  detail(cluster: string, withAudit: boolean): ClusterDetail | undefined {
    const state = this.clusters.get(cluster);
    if (!state) return undefined;
    return {
      row: { ...state.row, agentsByServer: { ...state.row.agentsByServer } },
      series: state.traffic.points(this.clock.now()),
      openStreams: state.openStreams,
      audit: withAudit ? state.audit.slice().reverse() : null,
    };
  }

  /** Hear of every change; returns the function that stops it. */
  subscribe(listener: (change: FleetChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(change: FleetChange): void {
    for (const listener of this.listeners) listener(change);
  }
}

function sameCounts(a: Record<string, number>, b: Record<string, number>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}

function sameRow(a: FleetRow, b: FleetRow): boolean {
  return (
    a.installed === b.installed &&
    a.available === b.available &&
    a.latencyMs === b.latencyMs &&
    sameCounts(a.agentsByServer, b.agentsByServer) &&
    a.serversExpected === b.serversExpected &&
    a.agentCertExpiry === b.agentCertExpiry &&
    a.lastChange === b.lastChange &&
    a.reason === b.reason
  );
}
