/**
 * The fleet view's model fed from the hub: rows from ManagedClusters and their addons' `Available`,
 * latency from the gateway's endpoint probes, traffic and audit tapped from request records.
 * Design: docs/design/gateway.md#the-fleet-view
 */
import { ADDON_NAME, parseTunnelHealth, parseTunnelReplicas } from "@cluster-proxy/api";
import type { Clock, Logger } from "@cluster-proxy/kit";
import type { AuditEntry, FleetModel, RowReport } from "@cluster-proxy/fleet";
import type { AuditRecord } from "../audit-log.js";
import type { EndpointProbe } from "../endpoint-probe.js";
import type { AddOnInfo, HubApi, ListEvent, ManagedClusterInfo } from "../hub-api.js";
import { ProbeScheduler } from "../probe-scheduler.js";
import type { RecordTap } from "../request-record.js";
import { errorMessage } from "@cluster-proxy/errors";

/** Default interval of a cluster's endpoint probe. */
export const FLEET_PROBE_INTERVAL_MS = 20_000;
/** Default number of endpoint probes at once. */
export const FLEET_PROBE_CONCURRENCY = 8;

/** Options of {@link FleetSource}. */
export interface FleetSourceOptions {
  hub: HubApi;
  model: FleetModel;
  /** Probe a cluster's agent endpoint (never rejects). */
  probe(cluster: string): Promise<EndpointProbe>;
  probeIntervalMs?: number;
  probeConcurrency?: number;
  logger?: Logger;
  /** The probes' schedule clock (default the kit's `realClock`). */
  clock?: Clock;
}

interface ProbeResult {
  latencyMs: number | null;
  expiry: string | null;
  reason: string;
}

/** See the module comment. */
export class FleetSource {
  private readonly clusters = new Set<string>();
  private readonly addOns = new Map<string, AddOnInfo>();
  private readonly probes = new Map<string, ProbeResult>();
  private readonly streams = new Map<string, number>();
  private readonly scheduler: ProbeScheduler;
  private stops: (() => void)[] = [];
  /** Rows are made once both lists arrived, so a row's first `lastChange` is the hub's. */
  private listed = { clusters: false, addOns: false };

  constructor(private readonly o: FleetSourceOptions) {
    this.scheduler = new ProbeScheduler({
      intervalMs: o.probeIntervalMs ?? FLEET_PROBE_INTERVAL_MS,
      concurrency: o.probeConcurrency ?? FLEET_PROBE_CONCURRENCY,
      run: (cluster) => this.probe(cluster),
      ...(o.clock ? { clock: o.clock } : {}),
    });
  }

  /** Endpoint probes running now. */
  get probesInFlight(): number {
    return this.scheduler.inFlight;
  }

  /** Watch the hub and start probing. */
  start(): void {
    this.scheduler.start();
    this.stops = [
      this.o.hub.watchManagedClusters((e) => this.onClusters(e)),
      this.o.hub.watchAddOns(ADDON_NAME, (e) => this.onAddOns(e)),
    ];
  }

  /** Stop watching and probing. */
  stop(): void {
    for (const s of this.stops.splice(0)) s();
    this.scheduler.stop();
    this.listed = { clusters: false, addOns: false };
  }

  /** What the gateway's request records tell the model (see the module comment). */
  readonly tap: RecordTap = {
    streamOpened: (cluster) => {
      if (cluster === undefined || !this.clusters.has(cluster)) return;
      const n = (this.streams.get(cluster) ?? 0) + 1;
      this.streams.set(cluster, n);
      this.o.model.setOpenStreams(cluster, n);
    },
    finished: (record, streamed) => {
      const cluster = record.cluster;
      if (cluster === undefined) return;
      const open = this.streams.get(cluster);
      if (streamed && open !== undefined) {
        if (open <= 1) this.streams.delete(cluster);
        else this.streams.set(cluster, open - 1);
        this.o.model.setOpenStreams(cluster, open - 1);
      }
      if (!this.o.model.has(cluster)) return;
      this.o.model.recordTraffic(cluster, {
        requests: 1,
        errors: record.code >= 500 || record.code === 0 ? 1 : 0,
        bytesIn: record.bytesIn,
        bytesOut: record.bytesOut,
      });
      this.o.model.recordAudit(cluster, auditEntryOf(record));
    },
  };

  private onClusters(e: ListEvent<ManagedClusterInfo>): void {
    if (e.kind === "list") {
      const names = new Set(e.items.map((c) => c.name));
      for (const c of [...this.clusters]) if (!names.has(c)) this.removeCluster(c);
      for (const c of names) this.addCluster(c);
      this.listedNow("clusters");
    } else if (e.kind === "set") this.addCluster(e.item.name);
    else this.removeCluster(e.name);
  }

  private onAddOns(e: ListEvent<AddOnInfo>): void {
    const touched = new Set<string>();
    if (e.kind === "list") {
      for (const c of this.addOns.keys()) touched.add(c);
      this.addOns.clear();
      for (const a of e.items) {
        this.addOns.set(a.cluster, a);
        touched.add(a.cluster);
      }
      this.listedNow("addOns");
    } else if (e.kind === "set") {
      this.addOns.set(e.item.cluster, e.item);
      touched.add(e.item.cluster);
    } else {
      this.addOns.delete(e.name);
      touched.add(e.name);
    }
    for (const c of touched) this.update(c);
  }

  private listedNow(which: "clusters" | "addOns"): void {
    if (this.listed[which]) return;
    this.listed[which] = true;
    if (this.listed.clusters && this.listed.addOns) for (const c of this.clusters) this.update(c);
  }

  private addCluster(cluster: string): void {
    if (this.clusters.has(cluster)) return;
    this.clusters.add(cluster);
    this.update(cluster);
  }

  private removeCluster(cluster: string): void {
    if (!this.clusters.delete(cluster)) return;
    this.probes.delete(cluster);
    this.streams.delete(cluster);
    this.scheduler.remove(cluster);
    this.o.model.removeCluster(cluster);
  }

  private async probe(cluster: string): Promise<void> {
    let r: EndpointProbe;
    try {
      r = await this.o.probe(cluster);
    } catch (err) {
      r = { ok: false, reason: `gateway endpoint: ${errorMessage(err)}` };
    }
    if (!this.scheduler.has(cluster)) return;
    const before = this.probes.get(cluster);
    this.probes.set(cluster, {
      latencyMs: r.ok ? (r.latencyMs ?? null) : null,
      // The last expiry seen is kept while the agent cannot be reached.
      expiry: r.certificateExpiry ?? before?.expiry ?? null,
      reason: r.reason,
    });
    if (!r.ok) this.o.logger?.debug({ cluster, reason: r.reason }, "fleet view: endpoint probe failed");
    this.update(cluster);
  }

  /** Recompute `cluster`'s row from what is known. */
  private update(cluster: string): void {
    if (!this.clusters.has(cluster) || !this.listed.clusters || !this.listed.addOns) return;
    const addOn = this.addOns.get(cluster);
    if (addOn) this.scheduler.add(cluster);
    else {
      this.scheduler.remove(cluster);
      this.probes.delete(cluster);
    }
    const condition = addOn?.available;
    const probe = this.probes.get(cluster);
    const counts = parseTunnelHealth(condition?.message);
    const replicas = parseTunnelReplicas(condition?.message);
    const agentsByServer: Record<string, number> = {};
    if (counts && replicas) {
      const reached = replicas.reached ?? Array.from({ length: counts.reachable }, (_, i) => `proxy-server ${i + 1}`);
      for (const name of replicas.failing) agentsByServer[name] = 0;
      for (const name of reached) agentsByServer[name] = 1;
    }
    const available = addOn ? (condition?.status ?? "Unknown") : "Unknown";
    let reason = "";
    if (!addOn) reason = `ManagedClusterAddOn ${ADDON_NAME} not found in namespace ${cluster}`;
    else if (!condition) reason = "no Available condition yet";
    else if (condition.status !== "True")
      reason = `Available=${condition.status} (${condition.reason}): ${condition.message}`;
    const report: RowReport = {
      cluster,
      installed: addOn !== undefined,
      available,
      latencyMs: probe?.latencyMs ?? null,
      agentsByServer,
      serversExpected: counts?.servers ?? null,
      agentCertExpiry: probe?.expiry ?? null,
      reason,
    };
    this.o.model.setRow(report, condition?.lastTransitionTime);
    this.o.model.setOpenStreams(cluster, this.streams.get(cluster) ?? 0);
  }
}

/** The fleet view's audit entry of a gateway audit record. */
export function auditEntryOf(r: AuditRecord): AuditEntry {
  const resource = r.service
    ? `service ${r.service}`
    : r.resource
      ? `${r.resource}${r.subresource ? `/${r.subresource}` : ""}`
      : "";
  const path = !r.service && !r.resource ? r.path : undefined;
  return {
    time: r.time,
    user: r.user ?? (r.authentication === "passthrough" ? "(pass-through token)" : ""),
    verb: r.verb ?? r.method.toLowerCase(),
    resource,
    ...(path ? { path } : {}),
    status: r.code,
    durationMs: r.durationMs,
    denied: r.decision === "deny",
    ...(r.reason ? { reason: r.reason } : {}),
  };
}
