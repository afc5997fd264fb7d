/**
 * The cluster-proxy addon manager: one process on the hub that, while it holds the leader Lease,
 * watches ManagedProxyConfigurations and what it made for them, and reconciles each into the
 * proxy-servers, their Services and certificates, and an honest status (docs/addon-manager.md).
 */
import type { KubeConfig } from "@kubernetes/client-node";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { AddonManagerOptions, ManagedProxyConfiguration } from "@cluster-proxy/api";
import { ConfigurationReconciler, type ObjectCache } from "./configuration-reconciler.js";
import { EventRecorder } from "./events.js";
import { HealthServer } from "./health-server.js";
import { KubeApi, Resources, type KubeObject } from "./kube-api.js";
import { CONFIGURATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SIGNER_LABEL } from "./labels.js";
import { LeaderElector } from "./leader-election.js";
import { silentLogger, type Logger } from "./logger.js";
import { SupervisedWatch } from "./supervised-watch.js";
import { WorkQueue } from "./work-queue.js";

export interface AddonManagerDeps {
  kubeConfig: KubeConfig;
  logger?: Logger;
}

const OWNED_KINDS = ["deployment", "service", "podDisruptionBudget", "serviceAccount", "secret"] as const;

export class AddonManager {
  private readonly api: KubeApi;
  private readonly log: Logger;
  private readonly elector: LeaderElector | undefined;
  private readonly registry = new Registry();
  private readonly health: HealthServer;
  private readonly stop = new AbortController();
  private watches: SupervisedWatch[] = [];
  private mpcWatch: SupervisedWatch | undefined;
  private ownedWatches = new Map<string, SupervisedWatch>();
  private running: Promise<unknown> | undefined;
  private lost: (() => void) | undefined;
  /** Resolves when leadership was lost: the process should exit so it restarts clean. */
  readonly leadershipLost: Promise<void>;
  private readonly reconciles: Counter;
  private readonly reconcileSeconds: Histogram;

  constructor(
    private readonly options: AddonManagerOptions,
    deps: AddonManagerDeps,
  ) {
    this.api = new KubeApi(deps.kubeConfig);
    this.log = deps.logger ?? silentLogger;
    this.leadershipLost = new Promise((resolve) => (this.lost = resolve));
    if (options.leaderElect)
      this.elector = new LeaderElector(
        this.api,
        {
          namespace: options.namespace,
          name: options.leaderElectionId,
          identity: options.identity,
          leaseDurationMs: options.leaseDuration,
          renewDeadlineMs: options.renewDeadline,
          retryPeriodMs: options.retryPeriod,
        },
        this.log,
      );
    this.reconciles = new Counter({
      name: "cluster_proxy_addon_manager_reconcile_total",
      help: "Reconciles of ManagedProxyConfigurations by result",
      labelNames: ["result"],
      registers: [this.registry],
    });
    this.reconcileSeconds = new Histogram({
      name: "cluster_proxy_addon_manager_reconcile_duration_seconds",
      help: "Duration of one reconcile",
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [this.registry],
    });
    const isLeader = (): boolean => this.isLeader();
    const watches = (): SupervisedWatch[] => this.watches;
    new Gauge({
      name: "cluster_proxy_addon_manager_leader",
      help: "1 while this replica is the leader (or leader election is off)",
      registers: [this.registry],
      collect() {
        this.set(isLeader() ? 1 : 0);
      },
    });
    new Gauge({
      name: "cluster_proxy_addon_manager_watch_restarts",
      help: "Times each watch was restarted (re-listed) since the manager became leader",
      labelNames: ["resource"],
      registers: [this.registry],
      collect() {
        for (const w of watches()) this.set({ resource: w.resource.plural }, w.restarts);
      },
    });
    this.health = new HealthServer({
      healthy: () => ({ ok: true, detail: "" }),
      ready: () => this.readiness(),
      metrics: this.registry,
    });
  }

  isLeader(): boolean {
    return this.elector ? this.elector.isLeader() : this.running !== undefined;
  }

  get identity(): string {
    return this.elector?.identity ?? "";
  }

  /** Start the health server and the campaign (or the controllers at once without leader election). */
  async start(): Promise<{ healthPort?: number; metricsPort?: number }> {
    const o = this.options;
    const listeners: { address: string; flag: string; paths: "health" | "metrics" | "both" }[] = [];
    if (o.healthProbeBindAddress && o.healthProbeBindAddress === o.metricsBindAddress)
      listeners.push({ address: o.healthProbeBindAddress, flag: "health-probe-bind-address", paths: "both" });
    else {
      if (o.healthProbeBindAddress)
        listeners.push({ address: o.healthProbeBindAddress, flag: "health-probe-bind-address", paths: "health" });
      if (o.metricsBindAddress)
        listeners.push({ address: o.metricsBindAddress, flag: "metrics-bind-address", paths: "metrics" });
    }
    const ports = await this.health.listen(listeners);
    if (this.elector) {
      void this.elector
        .run(this.stop.signal, (signal) => {
          this.running = this.runControllers(signal);
        })
        .then((lost) => {
          if (lost) this.lost?.();
        });
    } else {
      this.running = this.runControllers(this.stop.signal);
    }
    const byFlag = (flag: string): number | undefined => {
      const i = listeners.findIndex((l) => l.flag === flag || l.paths === "both");
      return i >= 0 ? ports[i] : undefined;
    };
    const health = byFlag("health-probe-bind-address");
    const metrics = listeners.findIndex((l) => l.flag === "metrics-bind-address" || l.paths === "both");
    return {
      ...(health !== undefined ? { healthPort: health } : {}),
      ...(metrics >= 0 ? { metricsPort: ports[metrics]! } : {}),
    };
  }

  /** Stop reconciling, release the Lease (so a standby takes over at once), close the servers. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.running?.catch(() => undefined);
    await this.elector?.release();
    await this.health.close();
  }

  private readiness(): { ok: boolean; detail: string } {
    if (this.elector && !this.elector.isLeader()) return { ok: true, detail: "standby" };
    const waiting = this.watches.filter((w) => !w.isSynced()).map((w) => w.resource.plural);
    if (!this.mpcWatch) return { ok: false, detail: "starting" };
    return waiting.length === 0
      ? { ok: true, detail: "" }
      : { ok: false, detail: `watches not synced: ${waiting.join(", ")}` };
  }

  private async runControllers(signal: AbortSignal): Promise<void> {
    const o = this.options;
    const queue: WorkQueue = new WorkQueue(
      async (key) => {
        const end = this.reconcileSeconds.startTimer();
        try {
          const result = await reconciler.reconcile(key);
          this.reconciles.inc({ result: "success" });
          return result;
        } catch (err) {
          this.reconciles.inc({ result: "error" });
          throw err;
        } finally {
          end();
        }
      },
      (key, err, retryInMs) =>
        this.log.warn({ configuration: key, err: (err as Error).message, retryInMs }, "reconcile failed; retrying"),
    );
    const enqueueAll = (): void => {
      for (const m of this.mpcWatch?.items() ?? []) queue.add(m.metadata.name);
    };
    this.mpcWatch = new SupervisedWatch(
      this.api,
      Resources.managedProxyConfiguration,
      {},
      (_t, obj) => queue.add(obj.metadata.name),
      this.log,
    );
    const selector = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;
    for (const kind of OWNED_KINDS) {
      this.ownedWatches.set(
        kind,
        new SupervisedWatch(
          this.api,
          Resources[kind],
          { labelSelector: selector },
          (_t, obj: KubeObject) => {
            const owner = obj.metadata.labels?.[CONFIGURATION_LABEL];
            if (owner) queue.add(owner);
            else if (obj.metadata.labels?.[SIGNER_LABEL]) enqueueAll();
          },
          this.log,
        ),
      );
    }
    this.watches = [this.mpcWatch, ...this.ownedWatches.values()];
    const cache: ObjectCache = {
      configuration: (name) => this.mpcWatch?.get(name) as unknown as ManagedProxyConfiguration | undefined,
      owned: (kind, name) =>
        (this.ownedWatches.get(kind)?.items() ?? []).filter(
          (obj) => obj.metadata.labels?.[CONFIGURATION_LABEL] === name,
        ),
    };
    const refresh = o.certRefreshAfter > 0 ? o.certRefreshAfter : o.certValidity * 0.8;
    const reconciler = new ConfigurationReconciler(
      this.api,
      cache,
      new EventRecorder(this.api, this.log),
      {
        signerNamespace: o.signerSecretNamespace || o.namespace,
        signerName: o.signerSecretName,
        caValidityMs: o.caValidity,
        leaf: { validityMs: o.certValidity, refreshAfterMs: refresh },
        resyncMs: o.resyncPeriod,
      },
      this.log,
    );
    this.log.info({ leader: this.identity || undefined }, "controllers started");
    const watching = this.watches.map((w) => w.run(signal));
    // Reconcile only once the caches are filled, so no decision is made on a partial view.
    const stopped = new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    await Promise.race([Promise.all(this.watches.map((w) => w.firstSync)), stopped]);
    await Promise.all([queue.run(signal), ...watching]);
  }
}
