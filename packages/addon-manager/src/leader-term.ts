/**
 * One leader's term of the addon manager: the watch caches, one reconciler per controller reading
 * them, and which change queues what. Design: docs/design/addon-manager.md#shape
 */
import {
  ADDON_NAME,
  ADDON_NAME_LABEL,
  GATEWAY_SERVING_SECRET,
  managedProxyConfigurationFromApi,
  type AddonManagerOptions,
  type ManagedProxyConfiguration,
} from "@cluster-proxy/api";
import {
  Controller,
  EventRecorder,
  SupervisedWatch,
  typedResource,
  type AnyWatch,
  type ControllerSpec,
  type KubeApi,
  type KubeObject,
  type ReconcileMetrics,
  type ResourceRef,
  type SupervisedWatchOptions,
} from "@cluster-proxy/kube";
import type { Clock, Logger } from "@cluster-proxy/kit";
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
import type { SecretObject } from "./certificate-authority.js";
import {
  CLUSTER_MANAGER_LABEL,
  ClusterProfileReconciler,
  ClusterProfileResource,
  OCM_CLUSTER_MANAGER,
  profileCluster,
  profileKey,
  type ClusterProfile,
  type ClusterProfileCache,
  type ProfileKey,
} from "./cluster-profile-reconciler.js";
import { ConfigurationReconciler, type ObjectCache } from "./configuration-reconciler.js";
import { CsrReconciler } from "./csr-reconciler.js";
import { CLUSTER_NAME_LABEL, type CsrObject } from "./csr-signer.js";
import { CONFIGURATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SIGNER_LABEL } from "./labels.js";
import { ManagementAddOnReconciler } from "./management-addon-reconciler.js";
import { Resources } from "./resources.js";
import { TunnelProber, replicaFinder } from "./tunnel-prober.js";

const OWNED_KINDS = ["deployment", "service", "podDisruptionBudget", "serviceAccount", "secret"] as const;
type OwnedKind = (typeof OWNED_KINDS)[number];

/** Which parts run this term (what the hub serves, asked before the term starts). */
export interface TermParts {
  /** Open Cluster Management's addon APIs are served: part 2, the addon side. */
  ocm: boolean;
  /** `--cluster-profiles`, and the ClusterProfile API is served: part 3 (needs part 2). */
  profiles: boolean;
}

/** What a term is built from. */
export interface TermDeps {
  api: KubeApi;
  options: AddonManagerOptions;
  parts: TermParts;
  metrics: ReconcileMetrics;
  clock: Clock;
  log: Logger;
}

/** Part 1: the configurations and every object the manager made for them. */
interface HubSide {
  mpcWatch: SupervisedWatch;
  ownedWatches: Map<OwnedKind, SupervisedWatch>;
  /** ManagedProxyConfigurations by name. */
  configurations: Controller<string>;
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

/** Part 2: the OCM addon. */
interface OcmSide {
  watches: OcmWatches;
  /** Probes each addon's tunnel (`--tunnel-probe-interval` > 0). */
  prober: TunnelProber | undefined;
  /** The one ClusterManagementAddOn. */
  managementAddOn: Controller<typeof ADDON_NAME>;
  /** The addon of each cluster, by cluster name. */
  addons: Controller<string>;
  /** The agents' certificate requests by CSR name. */
  csrs: Controller<string>;
}

/** Part 3: ClusterProfiles. */
interface ProfileSide {
  watch: SupervisedWatch<ClusterProfile>;
  profiles: Controller<ProfileKey>;
}

/** Which change queues what (the watches and the prober call these). */
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

/**
 * The watches, reconcilers and controllers of one leader's term, built in the order they depend
 * on each other: each part's watches, the reconcilers over their caches, a controller for each
 * reconciler. A watch's or the prober's change reaches the controllers through {@link enqueue},
 * which is set last: nothing calls it before {@link run}.
 */
export class LeaderTerm {
  private readonly hub: HubSide;
  private readonly ocm: OcmSide | undefined;
  private readonly profiles: ProfileSide | undefined;
  private readonly enqueue: Enqueuers;
  /** Every watch of the term (readiness waits until each has listed). */
  readonly watches: AnyWatch[];

  constructor(private readonly d: TermDeps) {
    this.hub = this.hubSide();
    this.ocm = d.parts.ocm ? this.ocmSide() : undefined;
    this.profiles = this.ocm && d.parts.profiles ? this.profileSide(this.ocm.watches) : undefined;
    this.enqueue = this.enqueuers();
    this.watches = [
      this.hub.mpcWatch,
      ...this.hub.ownedWatches.values(),
      ...(this.ocm ? ocmWatchList(this.ocm.watches) : []),
      ...(this.profiles ? [this.profiles.watch] : []),
    ];
  }

  /**
   * The watches, then, once every cache is filled, the controllers and the prober: the whole term
   * of a leader. Returns when `signal` aborts.
   */
  async run(signal: AbortSignal): Promise<void> {
    const watching = this.watches.map((w) => w.run(signal));
    // Reconcile only once the caches are filled, so no decision is made on a partial view.
    const stopped = new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    await Promise.race([Promise.all(this.watches.map((w) => w.firstSync)), stopped]);
    if (this.ocm) this.enqueue.addonSide();
    const controllers = [
      this.hub.configurations,
      ...(this.ocm ? [this.ocm.managementAddOn, this.ocm.addons, this.ocm.csrs] : []),
      ...(this.profiles ? [this.profiles.profiles] : []),
    ];
    await Promise.all([...controllers.map((c) => c.run(signal)), this.ocm?.prober?.run(signal), ...watching]);
  }

  /** A controller driving `reconciler`, counted and logged like every other. */
  private controller<K extends string>(reconciler: ControllerSpec<K>): Controller<K> {
    return new Controller(reconciler, this.d.metrics, this.d.log);
  }

  private watch<T extends KubeObject>(
    resource: ResourceRef<T>,
    onChange: (obj: T) => void,
    options: SupervisedWatchOptions = {},
  ): SupervisedWatch<T> {
    return new SupervisedWatch(this.d.api, resource, options, (_t, obj) => onChange(obj), this.d.log);
  }

  /** The watched ManagedProxyConfiguration `name` with the schema's defaults filled in. */
  private configuration(name: string): ManagedProxyConfiguration | undefined {
    const stored = this.hub.mpcWatch.get(name);
    return stored && managedProxyConfigurationFromApi(stored);
  }

  /** Which change queues what: the fan-out from the watches to the controllers. */
  private enqueuers(): Enqueuers {
    const { hub, ocm, profiles: side } = this;
    const profiles = (cluster?: string): void => {
      // ClusterProfiles (--cluster-profiles): every profile is looked at again whenever the addons'
      // inputs change (configurations, the gateway's serving Secret); level-based, so a look that
      // changes nothing writes nothing.
      if (!side) return;
      for (const p of side.watch.items())
        if (cluster === undefined || profileCluster(p) === cluster) side.profiles.add(profileKey(p));
    };
    return {
      configuration: (name) => hub.configurations.add(name),
      allConfigurations: () => {
        for (const m of hub.mpcWatch.items()) hub.configurations.add(m.metadata.name);
      },
      addonSide: () => {
        profiles();
        if (!ocm) return;
        ocm.managementAddOn.add(ADDON_NAME);
        for (const a of ocm.watches.addons.items()) if (a.metadata.namespace) ocm.addons.add(a.metadata.namespace);
      },
      addon: (cluster) => ocm?.addons.add(cluster),
      csr: (name) => ocm?.csrs.add(name),
      csrsOf: (cluster) => {
        for (const csr of ocm?.watches.csrs.items() ?? [])
          if (csr.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster) ocm?.csrs.add(csr.metadata.name);
      },
      profiles,
      profile: (key) => side?.profiles.add(key),
    };
  }

  /** Part 1: watch the configurations and every object the manager made for them; their reconciler. */
  private hubSide(): HubSide {
    const mpcWatch = this.watch(Resources.managedProxyConfiguration, (obj) => {
      this.enqueue.configuration(obj.metadata.name);
      this.enqueue.addonSide();
    });
    const selector = { labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}` };
    const ownedWatches = new Map<OwnedKind, SupervisedWatch>();
    for (const kind of OWNED_KINDS) {
      const onChange = (obj: KubeObject): void => {
        const owner = obj.metadata.labels?.[CONFIGURATION_LABEL];
        // The serving and gateway CA bundles the agents get are published in Secrets of the configuration.
        if (kind === "secret") this.enqueue.addonSide();
        if (owner) this.enqueue.configuration(owner);
        else if (obj.metadata.labels?.[SIGNER_LABEL]) this.enqueue.allConfigurations();
      };
      ownedWatches.set(kind, this.watch(Resources[kind], onChange, selector));
    }
    const cache: ObjectCache = {
      configuration: (name) => this.configuration(name),
      owned: (kind, name) =>
        (ownedWatches.get(kind)?.items() ?? []).filter((obj) => obj.metadata.labels?.[CONFIGURATION_LABEL] === name),
    };
    return { mpcWatch, ownedWatches, configurations: this.controller(this.newConfigurationReconciler(cache)) };
  }

  /** The reconciler of ManagedProxyConfigurations, reading the watch caches. */
  private newConfigurationReconciler(cache: ObjectCache): ConfigurationReconciler {
    const { api, options: o, log, clock } = this.d;
    const refresh = o.certRefreshAfter > 0 ? o.certRefreshAfter : o.certValidity * 0.8;
    return new ConfigurationReconciler(
      api,
      cache,
      new EventRecorder(api, log),
      {
        signerNamespace: o.signerSecretNamespace || o.namespace,
        signerName: o.signerSecretName,
        caValidityMs: o.caValidity,
        leaf: { validityMs: o.certValidity, refreshAfterMs: refresh },
        resyncMs: o.resyncPeriod,
      },
      log,
      clock,
    );
  }

  /** Part 2: watch the OCM objects of the addon; its tunnel prober, reconcilers and controllers. */
  private ocmSide(): OcmSide {
    const { api, options: o, log, clock } = this.d;
    const watches = this.watchOcmSide();
    const cache = this.addonCache(watches);
    const prober = this.newTunnelProber(cache);
    const agentCa = {
      signerNamespace: o.signerSecretNamespace || o.namespace,
      signerName: o.signerSecretName,
      caValidityMs: o.caValidity,
      certValidityMs: o.certValidity,
    };
    const addon = new AddonReconciler(
      api,
      cache,
      { gatewayImpersonationPrefix: o.gatewayImpersonationPrefix, ...agentCa },
      log,
      prober,
      clock,
    );
    const csr = new CsrReconciler(api, cache, { ...agentCa, csrCleanupAfterMs: o.csrCleanupAfter }, log, clock);
    return {
      watches,
      prober,
      managementAddOn: this.controller(
        new ManagementAddOnReconciler(api, cache, { installPlacement: o.installPlacement }, log),
      ),
      addons: this.controller(addon),
      csrs: this.controller(csr),
    };
  }

  /** The watches of the addon side, each queueing what its change concerns. */
  private watchOcmSide(): OcmWatches {
    const ours = { labelSelector: `${ADDON_NAME_LABEL}=${ADDON_NAME}` };
    return {
      addons: this.watch(OcmResources.addon, (obj) => {
        if (obj.metadata.name !== ADDON_NAME || !obj.metadata.namespace) return;
        this.enqueue.addon(obj.metadata.namespace);
        this.enqueue.profiles(obj.metadata.namespace);
        this.enqueue.csrsOf(obj.metadata.namespace);
      }),
      clusters: this.watch(OcmResources.cluster, (obj) => {
        this.enqueue.addon(obj.metadata.name);
        this.enqueue.csrsOf(obj.metadata.name);
      }),
      works: this.watch(
        OcmResources.work,
        (obj) => {
          if (obj.metadata.namespace) this.enqueue.addon(obj.metadata.namespace);
        },
        ours,
      ),
      managementAddOns: this.watch(OcmResources.managementAddOn, (obj) => {
        if (obj.metadata.name === ADDON_NAME) this.enqueue.addonSide();
      }),
      deploymentConfigs: this.watch(OcmResources.deploymentConfig, () => this.enqueue.addonSide()),
      csrs: this.watch(
        OcmResources.csr,
        (obj) => {
          this.enqueue.csr(obj.metadata.name);
          // The addon's Available counts the cluster's CSRs when OCM stops requesting; a new
          // request supersedes the cluster's earlier issued ones (csr-reconciler.ts, cleanUp).
          const cluster = obj.metadata.labels?.[CLUSTER_NAME_LABEL];
          if (cluster) {
            this.enqueue.addon(cluster);
            this.enqueue.csrsOf(cluster);
          }
        },
        ours,
      ),
    };
  }

  /** What the addon side's reconcilers read: the watch caches of the addon side and the configurations. */
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
  private newTunnelProber(cache: AddonCache): TunnelProber | undefined {
    const { api, options: o, log, clock } = this.d;
    if (o.tunnelProbeInterval <= 0) return undefined;
    return new TunnelProber(
      {
        intervalMs: o.tunnelProbeInterval,
        timeoutMs: o.tunnelProbeTimeout,
        replicas: replicaFinder(api, (name) => cache.configuration(name), undefined, clock),
        onChange: (cluster) => this.enqueue.addon(cluster),
      },
      log,
      clock,
    );
  }

  /** Part 3: watch the ClusterProfiles of OCM; their reconciler and controller. */
  private profileSide(ocm: OcmWatches): ProfileSide {
    const { api, options, log } = this.d;
    const watch = this.watch(ClusterProfileResource, (obj) => this.enqueue.profile(profileKey(obj)), {
      labelSelector: `${CLUSTER_MANAGER_LABEL}=${OCM_CLUSTER_MANAGER}`,
    });
    const reconciler = new ClusterProfileReconciler(
      api,
      this.profileCache(watch, ocm),
      new EventRecorder(api, log),
      { gatewayUrl: options.clusterProfileServer },
      log,
    );
    return { watch, profiles: this.controller(reconciler) };
  }

  /** What the ClusterProfile reconciler reads: the watch caches of profiles, addons, configurations and Secrets. */
  private profileCache(profiles: SupervisedWatch<ClusterProfile>, ocm: OcmWatches): ClusterProfileCache {
    const addon = (cluster: string): ManagedClusterAddOn | undefined => ocm.addons.get(ADDON_NAME, cluster);
    return {
      profile: (namespace, name) => profiles.get(name, namespace),
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
        const secret: SecretObject | undefined = this.hub.ownedWatches
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
