/**
 * The cluster-proxy addon manager: one process on the hub that, while it holds the leader Lease,
 * watches ManagedProxyConfigurations and what it made for them, and reconciles each into the
 * proxy-servers, their Services and certificates, and an honest status (docs/design/addon-manager.md).
 */
import { setMaxListeners } from "node:events";
import type { KubeConfig } from "@kubernetes/client-node";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import {
  managedProxyConfigurationFromApi,
  type AddonManagerOptions,
  type ManagedProxyConfiguration,
} from "@cluster-proxy/api";
import { AddonReconciler, type AddonCache } from "./addon-registration.js";
import { ConfigurationReconciler, type ObjectCache } from "./configuration-reconciler.js";
import { ADDON_NAME, ADDON_NAME_LABEL, CLUSTER_NAME_LABEL, type CsrObject } from "./csr-signer.js";
import { EventRecorder } from "./events.js";
import { HealthServer } from "./health-server.js";
import { backoffDelay, delay } from "./backoff.js";
import { isConflict, isNotFound, KubeApi, Resources, type KubeObject } from "./kube-api.js";
import { CONFIGURATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SIGNER_LABEL } from "./labels.js";
import { LeaderElector } from "./leader-election.js";
import { silentLogger, type Logger } from "./logger.js";
import { SupervisedWatch } from "./supervised-watch.js";
import { TunnelProber, replicaFinder } from "./tunnel-prober.js";
import { WorkQueue, type ReconcileResult } from "./work-queue.js";

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
  private ocmWatches:
    | Record<"addons" | "clusters" | "works" | "managementAddOns" | "deploymentConfigs" | "csrs", SupervisedWatch>
    | undefined;
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

  /**
   * Where a failed reconcile is logged: a conflict (our cache was behind a newer object; the key is
   * re-read and retried) is routine and goes to debug, anything else is a warning.
   */
  private retryLog(routine: boolean): Logger["warn"] {
    return routine
      ? (fields, message) => this.log.debug(fields, message)
      : (fields, message) => this.log.warn(fields, message);
  }

  /** The watched ManagedProxyConfiguration `name` with the schema's defaults filled in. */
  private configuration(name: string): ManagedProxyConfiguration | undefined {
    const stored = this.mpcWatch?.get(name);
    return stored && managedProxyConfigurationFromApi(stored);
  }

  private async runControllers(signal: AbortSignal): Promise<void> {
    const o = this.options;
    // Every watch and queue listens for the end of leadership.
    setMaxListeners(64, signal);
    const queue: WorkQueue = new WorkQueue(
      (key) => this.measured(() => reconciler.reconcile(key)),
      (key, err, retryInMs, routine) =>
        this.retryLog(routine)(
          { configuration: key, err: (err as Error).message, retryInMs },
          "reconcile failed; retrying",
        ),
      undefined,
      undefined,
      isConflict,
    );
    const enqueueAll = (): void => {
      for (const m of this.mpcWatch?.items() ?? []) queue.add(m.metadata.name);
    };
    const addonQueue = this.addonQueue();
    const enqueueAddons = (): void => {
      addonQueue.add("cma");
      for (const a of this.ocmWatches?.addons.items() ?? []) addonQueue.add(`addon/${a.metadata.namespace}`);
    };
    this.mpcWatch = new SupervisedWatch(
      this.api,
      Resources.managedProxyConfiguration,
      {},
      (_t, obj) => {
        queue.add(obj.metadata.name);
        enqueueAddons();
      },
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
            // The serving and gateway CA bundles the agents get are published in Secrets of the configuration.
            if (kind === "secret") enqueueAddons();
            if (owner) queue.add(owner);
            else if (obj.metadata.labels?.[SIGNER_LABEL]) enqueueAll();
          },
          this.log,
        ),
      );
    }
    const csrsOf = (cluster: string): void => {
      for (const c of this.ocmWatches?.csrs.items() ?? [])
        if (c.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster) addonQueue.add(`csr/${c.metadata.name}`);
    };
    const ocm = (
      resource: (typeof Resources)[keyof typeof Resources],
      onChange: (obj: KubeObject) => void,
      labelSelector?: string,
    ): SupervisedWatch =>
      new SupervisedWatch(
        this.api,
        resource,
        labelSelector ? { labelSelector } : {},
        (_t, obj) => onChange(obj),
        this.log,
      );
    let prober: TunnelProber | undefined;
    // Without Open Cluster Management's addon APIs the manager still runs the hub side (part 1).
    const withOcm = await this.ocmAddonApiPresent(signal);
    if (withOcm) {
      const ours = `${ADDON_NAME_LABEL}=${ADDON_NAME}`;
      this.ocmWatches = {
        addons: ocm(Resources.managedClusterAddOn, (obj) => {
          if (obj.metadata.name !== ADDON_NAME || !obj.metadata.namespace) return;
          addonQueue.add(`addon/${obj.metadata.namespace}`);
          csrsOf(obj.metadata.namespace);
        }),
        clusters: ocm(Resources.managedCluster, (obj) => {
          addonQueue.add(`addon/${obj.metadata.name}`);
          csrsOf(obj.metadata.name);
        }),
        works: ocm(Resources.manifestWork, (obj) => addonQueue.add(`addon/${obj.metadata.namespace}`), ours),
        managementAddOns: ocm(Resources.clusterManagementAddOn, (obj) => {
          if (obj.metadata.name === ADDON_NAME) enqueueAddons();
        }),
        deploymentConfigs: ocm(Resources.addOnDeploymentConfig, () => enqueueAddons()),
        csrs: ocm(Resources.certificateSigningRequest, (obj) => addonQueue.add(`csr/${obj.metadata.name}`), ours),
      };
      const w = this.ocmWatches;
      const addonCache: AddonCache = {
        addon: (cluster) => w.addons.get(ADDON_NAME, cluster),
        cluster: (name) => w.clusters.get(name),
        work: (cluster) => w.works.get(`addon-${ADDON_NAME}-deploy-0`, cluster),
        configuration: (name) => this.configuration(name),
        deploymentConfig: (namespace, name) => w.deploymentConfigs.get(name, namespace),
        managementAddOn: () => w.managementAddOns.get(ADDON_NAME),
        csr: (name) => w.csrs.get(name) as CsrObject | undefined,
      };
      if (o.tunnelProbeInterval > 0)
        prober = new TunnelProber(
          {
            intervalMs: o.tunnelProbeInterval,
            timeoutMs: o.tunnelProbeTimeout,
            replicas: replicaFinder(this.api, (name) => addonCache.configuration(name)),
            onChange: (cluster) => addonQueue.add(`addon/${cluster}`),
          },
          this.log,
        );
      this.addonReconciler = new AddonReconciler(
        this.api,
        addonCache,
        {
          installPlacement: o.installPlacement,
          signerNamespace: o.signerSecretNamespace || o.namespace,
          signerName: o.signerSecretName,
          caValidityMs: o.caValidity,
          certValidityMs: o.certValidity,
        },
        this.log,
        prober,
      );
    } else
      this.log.warn(
        {},
        "the Open Cluster Management addon APIs (addon.open-cluster-management.io/v1alpha1, work.open-cluster-management.io/v1) are not served: no agents are installed into managed clusters",
      );
    this.watches = [
      this.mpcWatch,
      ...this.ownedWatches.values(),
      ...(this.ocmWatches ? Object.values(this.ocmWatches) : []),
    ];
    const cache: ObjectCache = {
      configuration: (name) => this.configuration(name),
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
    if (withOcm) {
      addonQueue.add("cma");
      enqueueAddons();
    }
    await Promise.all([queue.run(signal), addonQueue.run(signal), prober?.run(signal), ...watching]);
  }

  /** Whether the hub serves the OCM APIs the addon side needs (asked until the apiserver answers). */
  private async ocmAddonApiPresent(signal: AbortSignal): Promise<boolean> {
    for (let attempt = 0; !signal.aborted; attempt++) {
      try {
        for (const group of [
          Resources.managedClusterAddOn.apiVersion,
          Resources.manifestWork.apiVersion,
          Resources.managedCluster.apiVersion,
        ])
          await this.api.request("GET", `/apis/${group}`);
        return true;
      } catch (err) {
        if (isNotFound(err)) return false;
        this.log.warn({ err: (err as Error).message }, "cannot discover the OCM APIs; retrying");
        await delay(backoffDelay(attempt, 500, 10_000), signal);
      }
    }
    return false;
  }

  private addonReconciler: AddonReconciler | undefined;

  /** Run one reconcile, counting it by result and timing it (both queues). */
  private async measured(reconcile: () => Promise<ReconcileResult>): Promise<ReconcileResult> {
    const end = this.reconcileSeconds.startTimer();
    try {
      const result = await reconcile();
      this.reconciles.inc({ result: "success" });
      return result;
    } catch (err) {
      this.reconciles.inc({ result: "error" });
      throw err;
    } finally {
      end();
    }
  }

  /** The queue of the OCM side: `cma`, `addon/<cluster>` and `csr/<name>` keys. */
  private addonQueue(): WorkQueue {
    return new WorkQueue(
      async (key) => {
        const r = this.addonReconciler;
        if (!r) return { requeueAfterMs: 1000 };
        const slash = key.indexOf("/");
        const kind = slash < 0 ? key : key.slice(0, slash);
        const name = key.slice(slash + 1);
        return this.measured(() =>
          kind === "cma"
            ? r.reconcileManagementAddOn()
            : kind === "addon"
              ? r.reconcileAddon(name)
              : r.reconcileCsr(name),
        );
      },
      (key, err, retryInMs, routine) =>
        this.retryLog(routine)({ key, err: (err as Error).message, retryInMs }, "addon reconcile failed; retrying"),
      undefined,
      undefined,
      isConflict,
    );
  }
}
