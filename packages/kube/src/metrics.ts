/**
 * The runtime's Prometheus metrics: reconciles (counted by result and timed, {@link ReconcileMetrics}),
 * whether this replica leads, and the restarts of each watch. Names start with a component prefix.
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { ReconcileMetrics } from "./controller.js";
import type { AnyWatch } from "./supervised-watch.js";

/** What the gauges read when scraped. */
export interface RuntimeMetricSources {
  /** True while this replica leads (or leader election is off and the controllers run). */
  isLeader(): boolean;
  /** The watches of the current term (none while standing by). */
  watches(): readonly AnyWatch[];
}

/**
 * Register `<prefix>_reconcile_total{result}`, `<prefix>_reconcile_duration_seconds`,
 * `<prefix>_leader` and `<prefix>_watch_restarts{resource}` in `registry`; returns the reconcile
 * metrics the controllers are measured by.
 */
export function registerRuntimeMetrics(
  registry: Registry,
  prefix: string,
  sources: RuntimeMetricSources,
): ReconcileMetrics {
  const reconciles = new ReconcileMetrics(
    new Counter({
      name: `${prefix}_reconcile_total`,
      help: "Reconciles of ManagedProxyConfigurations by result",
      labelNames: ["result"],
      registers: [registry],
    }),
    new Histogram({
      name: `${prefix}_reconcile_duration_seconds`,
      help: "Duration of one reconcile",
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
  );
  new Gauge({
    name: `${prefix}_leader`,
    help: "1 while this replica is the leader (or leader election is off)",
    registers: [registry],
    collect() {
      this.set(sources.isLeader() ? 1 : 0);
    },
  });
  new Gauge({
    name: `${prefix}_watch_restarts`,
    help: "Times each watch was restarted (re-listed) since the manager became leader",
    labelNames: ["resource"],
    registers: [registry],
    collect() {
      for (const w of sources.watches()) this.set({ resource: w.resource.plural }, w.restarts);
    },
  });
  return reconciles;
}
