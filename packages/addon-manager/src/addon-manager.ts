/**
 * The cluster-proxy addon manager: one process on the hub that, while it holds the leader Lease,
 * watches ManagedProxyConfigurations and what it made for them, and reconciles each into the
 * proxy-servers, their Services and certificates, and an honest status (docs/design/addon-manager.md).
 */
import { setMaxListeners } from "node:events";
import type { KubeConfig } from "@kubernetes/client-node";
import { Registry } from "prom-client";
import type { AddonManagerOptions } from "@cluster-proxy/api";
import { KubeApi, LeaderElector, apisServed, type ReconcileMetrics } from "@cluster-proxy/kube";
import { registerRuntimeMetrics } from "@cluster-proxy/kube/metrics";
import { Lifecycle, realClock, silentLogger, type Clock, type Component, type Logger } from "@cluster-proxy/kit";
import { ClusterProfileResource } from "./cluster-profile-reconciler.js";
import { HealthServer } from "./health-ports.js";
import { LeaderTerm } from "./leader-term.js";
import { MANAGED_BY } from "./labels.js";
import { Resources } from "./resources.js";

/**
 * The leader Lease's annotation that names the holder's pod (`<pod>/<uid>`): a new manager takes the
 * Lease at once when that pod is gone (an uninstall deletes the manager's RBAC before it can release).
 */
const LEADER_POD_ANNOTATION = "proxy.open-cluster-management.io/leader-pod";
/** What the manager is given besides its options: the hub's credentials, a logger and a clock. */
export interface AddonManagerDeps {
  kubeConfig: KubeConfig;
  logger?: Logger;
  /** What "now" is for certificates, conditions, CSR cleanup and the tunnel probes (default {@link realClock}). */
  clock?: Clock;
}

/** The ports the manager listens on (those a flag asked for). */
export interface AddonManagerStarted {
  healthPort?: number;
  metricsPort?: number;
}

/**
 * The wiring of the manager (docs/design/addon-manager.md, "Shape"): leader election, each term's
 * watches and controllers ({@link LeaderTerm}), and the health and metrics listeners.
 */
export class AddonManager implements Component<AddonManagerStarted> {
  private readonly life = new Lifecycle<AddonManagerStarted>("addon manager");
  private readonly api: KubeApi;
  private readonly log: Logger;
  private readonly elector: LeaderElector | undefined;
  private readonly registry = new Registry();
  private readonly health: HealthServer;
  private readonly stop = new AbortController();
  private readonly clock: Clock;
  /** The watches, reconcilers and controllers of this leader's term, once it started. */
  private term: LeaderTerm | undefined;
  private readonly metrics: ReconcileMetrics;
  private running: Promise<unknown> | undefined;
  private lost: (() => void) | undefined;
  /** Resolves when leadership was lost: the process should exit so it restarts clean. */
  readonly leadershipLost: Promise<void>;

  constructor(
    private readonly options: AddonManagerOptions,
    deps: AddonManagerDeps,
  ) {
    this.api = new KubeApi(deps.kubeConfig, { fieldManager: MANAGED_BY });
    this.log = deps.logger ?? silentLogger;
    this.clock = deps.clock ?? realClock;
    this.leadershipLost = new Promise((resolve) => (this.lost = resolve));
    if (options.leaderElect)
      this.elector = new LeaderElector(
        this.api,
        {
          namespace: options.namespace,
          name: options.leaderElectionId,
          identity: options.identity,
          pod: options.identity && options.podUid ? { name: options.identity, uid: options.podUid } : undefined,
          holderPodAnnotation: LEADER_POD_ANNOTATION,
          leaseDurationMs: options.leaseDuration,
          renewDeadlineMs: options.renewDeadline,
          retryPeriodMs: options.retryPeriod,
        },
        this.log,
      );
    this.metrics = registerRuntimeMetrics(this.registry, "cluster_proxy_addon_manager", {
      isLeader: () => this.isLeader(),
      watches: () => this.term?.watches ?? [],
    });
    this.health = new HealthServer({
      healthy: () => ({ ok: true, detail: "" }),
      ready: () => this.readiness(),
      metrics: this.registry,
    });
  }

  /** Whether this replica leads (without leader election: once the controllers run). */
  isLeader(): boolean {
    return this.elector ? this.elector.isLeader() : this.running !== undefined;
  }

  /** The leader-election identity (empty without leader election). */
  get identity(): string {
    return this.elector?.identity ?? "";
  }

  /** Start the health server and the campaign (or the controllers at once without leader election). */
  start(): Promise<AddonManagerStarted> {
    return this.life.start(() => this.listen());
  }

  private async listen(): Promise<AddonManagerStarted> {
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
  close(): Promise<void> {
    return this.life.close(() => this.shutdown());
  }

  private async shutdown(): Promise<void> {
    this.stop.abort();
    await this.running?.catch(() => undefined);
    await this.elector?.release();
    await this.health.close();
  }

  private readiness(): { ok: boolean; detail: string } {
    if (this.elector && !this.elector.isLeader()) return { ok: true, detail: "standby" };
    if (!this.term) return { ok: false, detail: "starting" };
    const waiting = this.term.watches.filter((w) => !w.isSynced()).map((w) => w.resource.plural);
    return waiting.length === 0
      ? { ok: true, detail: "" }
      : { ok: false, detail: `watches not synced: ${waiting.join(", ")}` };
  }

  /**
   * One leader's term: ask which parts the hub serves, then build the term (its watches, a
   * reconciler and controller for each kind of key) and run it. Returns when `signal` aborts.
   */
  private async runControllers(signal: AbortSignal): Promise<void> {
    // Every watch and queue listens for the end of leadership.
    setMaxListeners(64, signal);
    // Without Open Cluster Management's addon APIs the manager still runs the hub side (part 1).
    const ocm = await this.ocmAddonApiPresent(signal);
    if (!ocm && !signal.aborted) this.warnNoOcm();
    const profiles = ocm && this.options.clusterProfiles && (await this.clusterProfileApiPresent(signal));
    const term = new LeaderTerm({
      api: this.api,
      options: this.options,
      parts: { ocm, profiles },
      metrics: this.metrics,
      clock: this.clock,
      log: this.log,
    });
    this.term = term;
    this.log.info({ leader: this.identity || undefined }, "controllers started");
    await term.run(signal);
  }

  private warnNoOcm(): void {
    this.log.warn(
      {},
      "the Open Cluster Management addon APIs (addon.open-cluster-management.io/v1alpha1, work.open-cluster-management.io/v1) are not served: no agents are installed into managed clusters",
    );
  }

  /** Whether the hub serves the OCM APIs the addon side needs (asked until the apiserver answers). */
  private ocmAddonApiPresent(signal: AbortSignal): Promise<boolean> {
    const groups = [
      Resources.managedClusterAddOn.apiVersion,
      Resources.manifestWork.apiVersion,
      Resources.managedCluster.apiVersion,
    ];
    return apisServed(this.api, groups, "the OCM APIs", signal, this.log);
  }

  /**
   * Whether the hub serves the ClusterProfile API (asked until the apiserver answers). Not served:
   * a warning, and no ClusterProfile is looked at until the manager restarts.
   */
  private async clusterProfileApiPresent(signal: AbortSignal): Promise<boolean> {
    const api = ClusterProfileResource.apiVersion;
    const served = await apisServed(this.api, [api], "the ClusterProfile API", signal, this.log);
    if (!served && !signal.aborted)
      this.log.warn(
        { api },
        "--cluster-profiles: the ClusterProfile API is not served; no access provider is published",
      );
    return served;
  }
}
