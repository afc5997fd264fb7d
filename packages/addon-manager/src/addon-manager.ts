/**
 * The cluster-proxy addon manager: one process on the hub that, while it holds the leader Lease,
 * watches ManagedProxyConfigurations and what it made for them, and reconciles each into the
 * proxy-servers, their Services and certificates, and an honest status (docs/design/addon-manager.md).
 */
import { setMaxListeners } from "node:events";
import type { KubeConfig } from "@kubernetes/client-node";
import { Registry } from "prom-client";
import {
  ADDON_NAME,
  ADDON_NAME_LABEL,
  GATEWAY_SERVING_SECRET,
  managedProxyConfigurationFromApi,
  type AddonManagerOptions,
  type ManagedProxyConfiguration,
} from "@cluster-proxy/api";
import {
  AddonReconciler,
  DEFAULT_CONFIGURATION,
  type AddonCache,
  type ClusterManagementAddOn,
  type ManagedCluster,
  type ManagedClusterAddOn,
  type ManifestWork,
} from "./addon-reconciler.js";
import type { AddOnDeploymentConfigSpec } from "./agent-manifests.js";
import {
  CLUSTER_MANAGER_LABEL,
  ClusterProfileReconciler,
  ClusterProfileResource,
  OCM_CLUSTER_MANAGER,
  profileCluster,
  type ClusterProfile,
  type ClusterProfileCache,
} from "./cluster-profile-reconciler.js";
import { CsrReconciler } from "./csr-reconciler.js";
import { ConfigurationReconciler, type ObjectCache } from "./configuration-reconciler.js";
import { CLUSTER_NAME_LABEL, type CsrObject } from "./csr-signer.js";
import type { SecretObject } from "./certificate-authority.js";
import {
  Controller,
  EventRecorder,
  KubeApi,
  LeaderElector,
  SupervisedWatch,
  apisServed,
  typedResource,
  type AnyWatch,
  type ControllerSpec,
  type KubeObject,
  type ReconcileMetrics,
  type ResourceRef,
  type SupervisedWatchOptions,
} from "@cluster-proxy/kube";
import { registerRuntimeMetrics } from "@cluster-proxy/kube/metrics";
import { HealthServer } from "./health-ports.js";
import { Resources } from "./resources.js";
import { CONFIGURATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SIGNER_LABEL } from "./labels.js";
import { Lifecycle, silentLogger, type Component, type Logger } from "@cluster-proxy/kit";
import { TunnelProber, replicaFinder } from "./tunnel-prober.js";

/**
 * The leader Lease's annotation that names the holder's pod (`<pod>/<uid>`): a new manager takes the
 * Lease at once when that pod is gone (an uninstall deletes the manager's RBAC before it can release).
 */
const LEADER_POD_ANNOTATION = "proxy.open-cluster-management.io/leader-pod";
/** What the manager is given besides its options: the hub's credentials and a logger. */
export interface AddonManagerDeps {
  kubeConfig: KubeConfig;
  logger?: Logger;
}

const OWNED_KINDS = ["deployment", "service", "podDisruptionBudget", "serviceAccount", "secret"] as const;

/** A ClusterProfile's key: `<namespace>/<name>`. */
type ProfileKey = `${string}/${string}`;
const profileKey = (p: KubeObject): ProfileKey => `${p.metadata.namespace ?? ""}/${p.metadata.name}`;

/** The controllers of the manager, one queue each, keyed by what they reconcile. */
interface Controllers {
  /** ManagedProxyConfigurations by name (part 1). */
  configurations: Controller<string>;
  /** The one ClusterManagementAddOn (part 2). */
  managementAddOn: Controller<typeof ADDON_NAME>;
  /** The addon of each cluster, by cluster name (part 2). */
  addons: Controller<string>;
  /** The agents' certificate requests by CSR name (part 2). */
  csrs: Controller<string>;
  /** ClusterProfiles (part 3). */
  profiles: Controller<ProfileKey>;
}

/** Which change queues what (built by `enqueuers`; the watches call these). */
interface Enqueuers {
  configuration(name: string): void;
  allConfigurations(): void;
  /** Everything of the addon side whose inputs the hub side publishes: the CMA, every addon, every profile. */
  addonSide(): void;
  addon(cluster: string): void;
  csr(name: string): void;
  csrsOf(cluster: string): void;
  /** Every profile, or those of `cluster`. */
  profiles(cluster?: string): void;
  profile(key: ProfileKey): void;
}

/** The OCM resources of the addon side, typed by their objects. */
const OcmResources = {
  addon: typedResource<ManagedClusterAddOn>(Resources.managedClusterAddOn),
  cluster: typedResource<ManagedCluster>(Resources.managedCluster),
  work: typedResource<ManifestWork>(Resources.manifestWork),
  managementAddOn: typedResource<ClusterManagementAddOn>(Resources.clusterManagementAddOn),
  deploymentConfig: typedResource<KubeObject & { spec?: AddOnDeploymentConfigSpec }>(Resources.addOnDeploymentConfig),
  csr: typedResource<CsrObject>(Resources.certificateSigningRequest),
};

/** The watch caches of the addon side. */
interface OcmWatches {
  addons: SupervisedWatch<ManagedClusterAddOn>;
  clusters: SupervisedWatch<ManagedCluster>;
  works: SupervisedWatch<ManifestWork>;
  managementAddOns: SupervisedWatch<ClusterManagementAddOn>;
  deploymentConfigs: SupervisedWatch<KubeObject & { spec?: AddOnDeploymentConfigSpec }>;
  csrs: SupervisedWatch<CsrObject>;
}

/** The ports the manager listens on (those a flag asked for). */
export interface AddonManagerStarted {
  healthPort?: number;
  metricsPort?: number;
}

/**
 * The wiring of the manager (docs/design/addon-manager.md, "Shape"): the runtime's leader
 * election, watches and controllers around the reconcilers, and the health and metrics listeners.
 */
export class AddonManager implements Component<AddonManagerStarted> {
  private readonly life = new Lifecycle<AddonManagerStarted>("addon manager");
  private readonly api: KubeApi;
  private readonly log: Logger;
  private readonly elector: LeaderElector | undefined;
  private readonly registry = new Registry();
  private readonly health: HealthServer;
  private readonly stop = new AbortController();
  private watches: AnyWatch[] = [];
  private mpcWatch: SupervisedWatch | undefined;
  private ownedWatches = new Map<string, SupervisedWatch>();
  private ocmWatches: OcmWatches | undefined;
  private profileWatch: SupervisedWatch<ClusterProfile> | undefined;
  private configurationReconciler: ConfigurationReconciler | undefined;
  private addonReconciler: AddonReconciler | undefined;
  private csrReconciler: CsrReconciler | undefined;
  private profileReconciler: ClusterProfileReconciler | undefined;
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
      watches: () => this.watches,
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
    const waiting = this.watches.filter((w) => !w.isSynced()).map((w) => w.resource.plural);
    if (!this.mpcWatch) return { ok: false, detail: "starting" };
    return waiting.length === 0
      ? { ok: true, detail: "" }
      : { ok: false, detail: `watches not synced: ${waiting.join(", ")}` };
  }

  /** The watched ManagedProxyConfiguration `name` with the schema's defaults filled in. */
  private configuration(name: string): ManagedProxyConfiguration | undefined {
    const stored = this.mpcWatch?.get(name);
    return stored && managedProxyConfigurationFromApi(stored);
  }

  /**
   * The controllers (one queue each), the watches feeding them, then, once every cache is filled,
   * the reconciles: the whole term of a leader. Returns when `signal` aborts.
   */
  private async runControllers(signal: AbortSignal): Promise<void> {
    // Every watch and queue listens for the end of leadership.
    setMaxListeners(64, signal);
    const controllers = this.controllers();
    const enqueue = this.enqueuers(controllers);
    this.watchHubSide(enqueue);
    this.configurationReconciler = this.newConfigurationReconciler();
    // Without Open Cluster Management's addon APIs the manager still runs the hub side (part 1).
    const withOcm = await this.ocmAddonApiPresent(signal);
    const prober = withOcm ? this.startOcmSide(enqueue) : this.warnNoOcm();
    if (withOcm && this.options.clusterProfiles && (await this.clusterProfileApiPresent(signal)))
      this.startClusterProfiles(controllers);
    this.watches = [
      ...(this.mpcWatch ? [this.mpcWatch] : []),
      ...this.ownedWatches.values(),
      ...(this.ocmWatches ? ocmWatchList(this.ocmWatches) : []),
      ...(this.profileWatch ? [this.profileWatch] : []),
    ];
    this.log.info({ leader: this.identity || undefined }, "controllers started");
    const watching = this.watches.map((w) => w.run(signal));
    // Reconcile only once the caches are filled, so no decision is made on a partial view.
    const stopped = new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    await Promise.race([Promise.all(this.watches.map((w) => w.firstSync)), stopped]);
    if (withOcm) enqueue.addonSide();
    const c = controllers;
    await Promise.all([
      ...[c.configurations, c.managementAddOn, c.addons, c.csrs, c.profiles].map((one) => one.run(signal)),
      prober?.run(signal),
      ...watching,
    ]);
  }

  /** The controllers, one queue of typed keys each; a reconciler not (yet) there reconciles nothing. */
  private controllers(): Controllers {
    const controller = <K extends string>(spec: ControllerSpec<K>): Controller<K> =>
      new Controller(spec, this.metrics, this.log);
    return {
      configurations: controller({
        what: "reconcile",
        logFields: (name) => ({ configuration: name }),
        reconcile: async (name) => this.configurationReconciler?.reconcile(name),
      }),
      managementAddOn: controller<typeof ADDON_NAME>({
        what: "addon reconcile",
        logFields: () => ({ key: "cma" }),
        reconcile: async () => this.addonReconciler?.reconcileManagementAddOn(),
      }),
      addons: controller({
        what: "addon reconcile",
        logFields: (cluster) => ({ key: `addon/${cluster}` }),
        reconcile: async (cluster) => this.addonReconciler?.reconcileAddon(cluster),
      }),
      csrs: controller({
        what: "addon reconcile",
        logFields: (csr) => ({ key: `csr/${csr}` }),
        reconcile: async (csr) => this.csrReconciler?.reconcileCsr(csr),
      }),
      profiles: controller<ProfileKey>({
        what: "ClusterProfile reconcile",
        logFields: (key) => ({ clusterProfile: key }),
        reconcile: async (key) => this.profileReconciler?.reconcile(key),
      }),
    };
  }

  /** Which change queues what: the fan-out from the watches to the controllers. */
  private enqueuers(c: Controllers): Enqueuers {
    const profiles = (cluster?: string): void => {
      // ClusterProfiles (--cluster-profiles): every profile is looked at again whenever the addons'
      // inputs change (configurations, the gateway's serving Secret); level-based, so a look that
      // changes nothing writes nothing.
      for (const p of this.profileWatch?.items() ?? [])
        if (cluster === undefined || profileCluster(p) === cluster) c.profiles.add(profileKey(p));
    };
    const addonSide = (): void => {
      profiles();
      c.managementAddOn.add(ADDON_NAME);
      for (const a of this.ocmWatches?.addons.items() ?? [])
        if (a.metadata.namespace) c.addons.add(a.metadata.namespace);
    };
    return {
      configuration: (name) => c.configurations.add(name),
      allConfigurations: () => {
        for (const m of this.mpcWatch?.items() ?? []) c.configurations.add(m.metadata.name);
      },
      addonSide,
      addon: (cluster) => c.addons.add(cluster),
      csr: (name) => c.csrs.add(name),
      csrsOf: (cluster) => {
        for (const csr of this.ocmWatches?.csrs.items() ?? [])
          if (csr.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster) c.csrs.add(csr.metadata.name);
      },
      profiles,
      profile: (key) => c.profiles.add(key),
    };
  }

  /** Watch the configurations and every object the manager made for them (part 1). */
  private watchHubSide(enqueue: Enqueuers): void {
    this.mpcWatch = new SupervisedWatch(
      this.api,
      Resources.managedProxyConfiguration,
      {},
      (_t, obj) => {
        enqueue.configuration(obj.metadata.name);
        enqueue.addonSide();
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
          (_t, obj) => {
            const owner = obj.metadata.labels?.[CONFIGURATION_LABEL];
            // The serving and gateway CA bundles the agents get are published in Secrets of the configuration.
            if (kind === "secret") enqueue.addonSide();
            if (owner) enqueue.configuration(owner);
            else if (obj.metadata.labels?.[SIGNER_LABEL]) enqueue.allConfigurations();
          },
          this.log,
        ),
      );
    }
  }

  /** The reconciler of ManagedProxyConfigurations, reading the watch caches. */
  private newConfigurationReconciler(): ConfigurationReconciler {
    const o = this.options;
    const cache: ObjectCache = {
      configuration: (name) => this.configuration(name),
      owned: (kind, name) =>
        (this.ownedWatches.get(kind)?.items() ?? []).filter(
          (obj) => obj.metadata.labels?.[CONFIGURATION_LABEL] === name,
        ),
    };
    const refresh = o.certRefreshAfter > 0 ? o.certRefreshAfter : o.certValidity * 0.8;
    return new ConfigurationReconciler(
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
  }

  /** Watch the OCM objects of the addon (part 2) and make its reconciler and tunnel prober. */
  private startOcmSide(enqueue: Enqueuers): TunnelProber | undefined {
    this.ocmWatches = this.watchOcmSide(enqueue);
    const cache = this.addonCache(this.ocmWatches);
    const prober = this.newTunnelProber(cache, enqueue);
    const o = this.options;
    const agentCa = {
      signerNamespace: o.signerSecretNamespace || o.namespace,
      signerName: o.signerSecretName,
      caValidityMs: o.caValidity,
      certValidityMs: o.certValidity,
    };
    this.addonReconciler = new AddonReconciler(
      this.api,
      cache,
      { installPlacement: o.installPlacement, gatewayImpersonationPrefix: o.gatewayImpersonationPrefix, ...agentCa },
      this.log,
      prober,
    );
    this.csrReconciler = new CsrReconciler(
      this.api,
      cache,
      { ...agentCa, csrCleanupAfterMs: o.csrCleanupAfter },
      this.log,
    );
    return prober;
  }

  /** The watches of the addon side, each queueing what its change concerns. */
  private watchOcmSide(enqueue: Enqueuers): OcmWatches {
    const ours = { labelSelector: `${ADDON_NAME_LABEL}=${ADDON_NAME}` };
    const watch = <T extends KubeObject>(
      resource: ResourceRef<T>,
      onChange: (obj: T) => void,
      options: SupervisedWatchOptions = {},
    ): SupervisedWatch<T> => new SupervisedWatch(this.api, resource, options, (_t, obj) => onChange(obj), this.log);
    return {
      addons: watch(OcmResources.addon, (obj) => {
        if (obj.metadata.name !== ADDON_NAME || !obj.metadata.namespace) return;
        enqueue.addon(obj.metadata.namespace);
        enqueue.profiles(obj.metadata.namespace);
        enqueue.csrsOf(obj.metadata.namespace);
      }),
      clusters: watch(OcmResources.cluster, (obj) => {
        enqueue.addon(obj.metadata.name);
        enqueue.csrsOf(obj.metadata.name);
      }),
      works: watch(
        OcmResources.work,
        (obj) => {
          if (obj.metadata.namespace) enqueue.addon(obj.metadata.namespace);
        },
        ours,
      ),
      managementAddOns: watch(OcmResources.managementAddOn, (obj) => {
        if (obj.metadata.name === ADDON_NAME) enqueue.addonSide();
      }),
      deploymentConfigs: watch(OcmResources.deploymentConfig, () => enqueue.addonSide()),
      csrs: watch(
        OcmResources.csr,
        (obj) => {
          enqueue.csr(obj.metadata.name);
          // The addon's Available counts the cluster's CSRs when OCM stops requesting; a new
          // request supersedes the cluster's earlier issued ones (csr-reconciler.ts, cleanUp).
          const cluster = obj.metadata.labels?.[CLUSTER_NAME_LABEL];
          if (cluster) {
            enqueue.addon(cluster);
            enqueue.csrsOf(cluster);
          }
        },
        ours,
      ),
    };
  }

  /** What the addon reconciler reads: the watch caches of the addon side and the configurations. */
  private addonCache(w: OcmWatches): AddonCache {
    return {
      addon: (cluster) => w.addons.get(ADDON_NAME, cluster),
      cluster: (name) => w.clusters.get(name),
      work: (cluster) => w.works.get(`addon-${ADDON_NAME}-deploy-0`, cluster),
      configuration: (name) => this.configuration(name),
      deploymentConfig: (namespace, name) => w.deploymentConfigs.get(name, namespace),
      managementAddOn: () => w.managementAddOns.get(ADDON_NAME),
      csr: (name) => w.csrs.get(name),
      csrCount: (cluster) => w.csrs.items().filter((c) => c.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster).length,
      csrsOf: (cluster) => w.csrs.items().filter((c) => c.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster),
    };
  }

  /** The tunnel prober (`--tunnel-probe-interval` > 0), queueing a cluster's addon when its picture changes. */
  private newTunnelProber(cache: AddonCache, enqueue: Enqueuers): TunnelProber | undefined {
    const o = this.options;
    if (o.tunnelProbeInterval <= 0) return undefined;
    return new TunnelProber(
      {
        intervalMs: o.tunnelProbeInterval,
        timeoutMs: o.tunnelProbeTimeout,
        replicas: replicaFinder(this.api, (name) => cache.configuration(name)),
        onChange: (cluster) => enqueue.addon(cluster),
      },
      this.log,
    );
  }

  private warnNoOcm(): undefined {
    this.log.warn(
      {},
      "the Open Cluster Management addon APIs (addon.open-cluster-management.io/v1alpha1, work.open-cluster-management.io/v1) are not served: no agents are installed into managed clusters",
    );
    return undefined;
  }

  /** Watch the ClusterProfiles of OCM (part 3) and make their reconciler. */
  private startClusterProfiles(c: Controllers): void {
    this.profileWatch = new SupervisedWatch(
      this.api,
      ClusterProfileResource,
      { labelSelector: `${CLUSTER_MANAGER_LABEL}=${OCM_CLUSTER_MANAGER}` },
      (_t, obj) => c.profiles.add(profileKey(obj)),
      this.log,
    );
    this.profileReconciler = new ClusterProfileReconciler(
      this.api,
      this.profileCache(),
      new EventRecorder(this.api, this.log),
      { gatewayUrl: this.options.clusterProfileServer },
      this.log,
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

  /** What the ClusterProfile reconciler reads: the watch caches of profiles, addons, configurations and Secrets. */
  private profileCache(): ClusterProfileCache {
    const addon = (cluster: string): ManagedClusterAddOn | undefined =>
      this.ocmWatches?.addons.get(ADDON_NAME, cluster);
    return {
      profile: (namespace, name) => this.profileWatch?.get(name, namespace),
      addonInstalled: (cluster) => {
        const a = addon(cluster);
        return a !== undefined && !a.metadata.deletionTimestamp;
      },
      gatewayNamespace: (cluster) => {
        const ref = addon(cluster)?.status?.configReferences?.find(
          (r) => r.resource === "managedproxyconfigurations" && r.group === "proxy.open-cluster-management.io",
        );
        // OCM may list a reference with an empty name while it resolves the configs.
        const name = ref?.desiredConfig?.name || ref?.name || DEFAULT_CONFIGURATION;
        return this.configuration(name)?.spec.proxyServer.namespace;
      },
      gatewayCaBundle: (namespace) => {
        const secret: SecretObject | undefined = this.ownedWatches
          .get("secret")
          ?.get(GATEWAY_SERVING_SECRET, namespace);
        const ca = secret?.data?.["ca.crt"];
        return ca ? Buffer.from(ca, "base64").toString() : undefined;
      },
    };
  }
}

function ocmWatchList(w: OcmWatches): AnyWatch[] {
  return [w.addons, w.clusters, w.works, w.managementAddOns, w.deploymentConfigs, w.csrs];
}
