/**
 * The `addons` controller: for every ManagedClusterAddOn given to the ClusterManagementAddOn, the
 * registration, the agent ManifestWork, ManifestApplied and Available; and the OCM types, cache and
 * agent CA the addon side's reconcilers share. Design: docs/design/addon-manager.md#modules
 */
import { createHash } from "node:crypto";
import {
  ADDON_NAME,
  GATEWAY_IDENTITY_SECRET,
  MPC_API_VERSION,
  SERVER_CA_SECRET,
  type Condition,
  type ManagedProxyConfiguration,
} from "@cluster-proxy/api";
import { agentFeedback, availability, type Availability, type FeedbackValue } from "./addon-availability.js";
import {
  AGENT_CERT_SECRET,
  AGENT_DEPLOYMENT,
  DEFAULT_AGENT_NAMESPACE,
  renderAgentWork,
  specHash,
  type AddOnDeploymentConfigSpec,
} from "./agent-manifests.js";
import { ensureCa, unb64, type SecretObject, type SigningCa } from "./certificate-authority.js";
import {
  mergeConditions,
  type ConditionInput,
  type ControllerSpec,
  type KubeApi,
  type KubeObject,
  type ReconcileResult,
} from "@cluster-proxy/kube";
import {
  AGENT_SIGNER,
  HUB_CLIENT_SIGNER,
  OCM_ADDON_CSR_LIMIT,
  type CsrObject,
  type RegistrationSubject,
} from "./csr-signer.js";
import { Resources } from "./resources.js";
import { contentHash } from "./content-hash.js";
import { SPEC_HASH_ANNOTATION } from "./labels.js";
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";
import { AGENT_HUB_GROUP, usesPortForward } from "./render-proxy-server.js";
import type { TunnelProber } from "./tunnel-prober.js";

export const MPC_GROUP = MPC_API_VERSION.split("/")[0]!;
export const MPC_RESOURCE = "managedproxyconfigurations";
export const ADDON_GROUP = "addon.open-cluster-management.io";
export const ADC_RESOURCE = "addondeploymentconfigs";
export const DEFAULT_CONFIGURATION = "cluster-proxy";
const HOSTING_ANNOTATION = "addon.open-cluster-management.io/hosting-cluster-name";

export interface ConfigReference {
  group: string;
  resource: string;
  name?: string;
  namespace?: string;
  lastObservedGeneration?: number;
  desiredConfig?: { name: string; namespace?: string; specHash?: string };
  [key: string]: unknown;
}

export interface ManagedClusterAddOn extends KubeObject {
  spec?: { configs?: { group?: string; resource: string; name: string; namespace?: string }[] };
  status?: {
    conditions?: Condition[];
    configReferences?: ConfigReference[];
    registrations?: { signerName: string; subject?: RegistrationSubject }[];
    namespace?: string;
    supportedConfigs?: { group: string; resource: string }[];
    healthCheck?: { mode?: string };
    [key: string]: unknown;
  };
}

export interface ManagedCluster extends KubeObject {
  spec?: { hubAcceptsClient?: boolean; managedClusterClientConfigs?: { url?: string; caBundle?: string }[] };
  status?: { conditions?: Condition[] };
}

export interface ManifestWork extends KubeObject {
  status?: {
    conditions?: Condition[];
    resourceStatus?: {
      manifests?: {
        resourceMeta?: { kind?: string; name?: string; namespace?: string };
        statusFeedback?: { values?: FeedbackValue[] };
      }[];
    };
  };
}

export interface ClusterManagementAddOn extends KubeObject {
  status?: {
    defaultconfigReferences?: { group: string; resource: string; desiredConfig?: ConfigReference["desiredConfig"] }[];
    installProgressions?: { configReferences?: ConfigReference[]; [key: string]: unknown }[];
    [key: string]: unknown;
  };
}

/** What the config references need of a config object (a ManagedProxyConfiguration or an AddOnDeploymentConfig). */
export interface ConfigObject {
  metadata: { generation?: number };
  spec?: unknown;
}

/** A ManagedClusterAddOn's status, as one reconcile builds it up before its single write. */
type AddonStatus = NonNullable<ManagedClusterAddOn["status"]>;

/** The configs an addon resolved to ({@link AddonReconciler} step `resolveConfigs`). */
interface AddonConfigs {
  /** The addon's config references (those of the status being built). */
  refs: ConfigReference[];
  /** The ManagedProxyConfiguration's name (the default one when OCM names none). */
  mpcName: string;
  /** The AddOnDeploymentConfig, when one is referenced and cached. */
  adc: (KubeObject & { spec?: AddOnDeploymentConfigSpec }) | undefined;
}

/** What the reconciler reads from the manager's watch caches. */
export interface AddonCache {
  addon(cluster: string): ManagedClusterAddOn | undefined;
  cluster(name: string): ManagedCluster | undefined;
  work(cluster: string): ManifestWork | undefined;
  /** The configuration `name` with the schema's defaults filled in (`managedProxyConfigurationFromApi`). */
  configuration(name: string): ManagedProxyConfiguration | undefined;
  deploymentConfig(namespace: string, name: string): (KubeObject & { spec?: AddOnDeploymentConfigSpec }) | undefined;
  managementAddOn(): ClusterManagementAddOn | undefined;
  csr(name: string): CsrObject | undefined;
  /** How many CSRs of the addon (its label) for `cluster` the hub has (undefined: not known). */
  csrCount?(cluster: string): number;
  /** The CSRs of the addon (its label) for `cluster` (label `cluster-name`) on the hub. */
  csrsOf?(cluster: string): CsrObject[];
}

/** The agent CA (`<signer>-agent`) and the certificates it signs. */
export interface AgentCaOptions {
  signerNamespace: string;
  signerName: string;
  caValidityMs: number;
  certValidityMs: number;
}

export interface AddonOptions extends AgentCaOptions {
  /** The gateway's impersonation prefix, rendered into the agents (`--gateway-impersonation-prefix`). */
  gatewayImpersonationPrefix?: string;
}

/** The condition OCM's registration agent writes about the agent's certificate (OCM v1.2.1). */
export const CERTIFICATE_ROTATED_CONDITION = "ClusterCertificateRotated";

export const SUPPORTED_CONFIGS = [
  { group: MPC_GROUP, resource: MPC_RESOURCE },
  { group: ADDON_GROUP, resource: ADC_RESOURCE },
];

/**
 * The subject the agents' certificates carry (Go cluster-proxy's, so its dashboards and RBAC
 * match). The cluster is not in the subject (a CN has at most 64 characters, a cluster name up to
 * 63): it is bound by the URI SAN our signer sets from the requester's identity. The OU names the
 * agent CA, so a new CA changes the registration and OCM's registration agent asks for new
 * certificates at once.
 */
export function agentSubject(agentCa: SigningCa): RegistrationSubject {
  const caHash = createHash("sha256").update(agentCa.cert.certPem.trim()).digest("hex").slice(0, 32);
  return {
    user: AGENT_USER,
    groups: [AGENT_GROUP],
    organizationUnit: [`signer-${caHash}`],
  };
}
export const AGENT_USER = "open-cluster-management:cluster-proxy:proxy-agent";

/**
 * The agent's hub identity with entrypoint PortForward (signer kubernetes.io/kube-apiserver-client):
 * OCM's default per-cluster user, and two groups: the per-cluster one, and {@link AGENT_HUB_GROUP},
 * which the proxy-servers' namespace binds to get pods/proxy and list/watch endpointslices.
 */
export function agentHubSubject(cluster: string): RegistrationSubject {
  return {
    user: `system:open-cluster-management:cluster:${cluster}:addon:${ADDON_NAME}:agent:proxy-agent`,
    groups: [`system:open-cluster-management:cluster:${cluster}:addon:${ADDON_NAME}`, AGENT_HUB_GROUP],
  };
}
export const AGENT_GROUP = "open-cluster-management:cluster-proxy";

const refKey = (r: { group?: string; resource: string }): string => `${r.resource}.${r.group ?? ""}`;
/** Whether two JSON values are the same (what a status write compares). */
export const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** The agent CA (Secret `<signer>-agent` in the signer namespace), made when missing, renewed at 80% of its life. */
export function ensureAgentCa(api: KubeApi, o: AgentCaOptions, clock: Clock = realClock): Promise<SigningCa> {
  return ensureCa(api, "agent", o.signerNamespace, `${o.signerName}-agent`, {
    caValidityMs: o.caValidityMs,
    create: true,
    clock,
  });
}

/** A config object an addon or the ClusterManagementAddOn refers to: what its hash and generation come from. */
export function configObject(
  cache: Pick<AddonCache, "configuration" | "deploymentConfig">,
  ref: { group?: string; resource: string; name: string; namespace?: string },
): ConfigObject | undefined {
  if (ref.resource === MPC_RESOURCE && (ref.group ?? "") === MPC_GROUP) return cache.configuration(ref.name);
  if (ref.resource === ADC_RESOURCE && (ref.group ?? "") === ADDON_GROUP && ref.namespace)
    return cache.deploymentConfig(ref.namespace, ref.name);
  return undefined;
}

/**
 * The `addons` controller's reconciler, keyed by cluster: each cluster's ManagedClusterAddOn (the
 * ClusterManagementAddOn is management-addon-reconciler.ts's, the agents' CSRs csr-reconciler.ts's).
 */
export class AddonReconciler implements ControllerSpec<string> {
  readonly what = "addon reconcile";

  constructor(
    private readonly api: KubeApi,
    private readonly cache: AddonCache,
    private readonly options: AddonOptions,
    private readonly logger: Logger,
    /** Probes each cluster's tunnel; without it (probing disabled) Available is Unknown. */
    private readonly prober?: TunnelProber,
    /** What "now" is for the agent CA and the conditions. */
    private readonly clock: Clock = realClock,
  ) {}

  logFields(cluster: string): Record<string, unknown> {
    return { key: `addon/${cluster}` };
  }

  private agentCa(): Promise<SigningCa> {
    return ensureAgentCa(this.api, this.options, this.clock);
  }

  /**
   * Registration, agent ManifestWork and status of ManagedClusterAddOn `cluster-proxy` in
   * `cluster`, in named steps: {@link addonInScope} -> {@link refuseHostedMode} ->
   * {@link resolveConfigs} -> {@link register} -> {@link deployAgent} -> {@link reportHealth} ->
   * one status write ({@link writeStatus}).
   */
  async reconcile(cluster: string): Promise<ReconcileResult> {
    const scope = this.addonInScope(cluster);
    if (!scope) return;
    const { mca, mc } = scope;
    const status = structuredClone(mca.status ?? {});
    const hosted = this.refuseHostedMode(mca, cluster);
    if (hosted) {
      await this.writeStatus(mca, status, [hosted]);
      return;
    }
    const configs = this.resolveConfigs(mca, status);
    const namespace = configs.adc?.spec?.agentInstallNamespace || DEFAULT_AGENT_NAMESPACE;
    const agentCa = await this.agentCa();
    const mpc = this.cache.configuration(configs.mpcName);
    const conditions: ConditionInput[] = [this.register(cluster, status, namespace, agentCa, mpc)];
    const deployed = await this.deployAgent(mca, cluster, namespace, configs, mpc);
    if (deployed.condition) conditions.push(deployed.condition);
    let requeue = deployed.retryAfterMs;
    const health = this.reportHealth(mca, mc, mpc);
    if (health) {
      conditions.push(health.condition);
      // A held Available ends by time: look again then.
      if (health.recheckAfterMs !== undefined) requeue = Math.min(requeue ?? Infinity, health.recheckAfterMs);
    }
    await this.writeStatus(mca, status, conditions);
    return requeue !== undefined ? { requeueAfterMs: requeue } : undefined;
  }

  /**
   * Step: the addon and its cluster, when the addon is ours to reconcile. A deleted addon's work
   * and everything in it go with it (ownerReference; OCM's work agent): its tunnel is no longer
   * probed. OCM's addon manager gives the addon an owner once the ClusterManagementAddOn exists;
   * until then, and while its ManagedCluster is not cached, there is nothing to do.
   */
  private addonInScope(cluster: string): { mca: ManagedClusterAddOn; mc: ManagedCluster } | undefined {
    const mca = this.cache.addon(cluster);
    if (!mca || mca.metadata.deletionTimestamp) {
      this.prober?.untrack(cluster);
      return undefined;
    }
    const owned = mca.metadata.ownerReferences?.some(
      (o) => o.kind === "ClusterManagementAddOn" && o.name === ADDON_NAME,
    );
    if (!owned) return undefined;
    const mc = this.cache.cluster(cluster);
    return mc ? { mca, mc } : undefined;
  }

  /** Step: `RegistrationApplied=False HostedModeUnsupported` for an addon in Hosted mode, which is refused. */
  private refuseHostedMode(mca: ManagedClusterAddOn, cluster: string): ConditionInput | undefined {
    if (!mca.metadata.annotations?.[HOSTING_ANNOTATION]) return undefined;
    return {
      type: "RegistrationApplied",
      status: "False",
      reason: "HostedModeUnsupported",
      message: `cluster-proxy does not support Hosted mode (annotation ${HOSTING_ANNOTATION}): remove it to install the agent into ${cluster} itself`,
    };
  }

  /**
   * Step: the configs OCM resolved for the addon (defaults < placements < the addon's own
   * spec.configs): the configuration's name, the AddOnDeploymentConfig, and in `status` each
   * config reference's observed generation and, for those named in the addon's own spec, its spec
   * hash (OCM copies the hashes of defaults from the ClusterManagementAddOn).
   */
  private resolveConfigs(mca: ManagedClusterAddOn, status: AddonStatus): AddonConfigs {
    const refs = status.configReferences ?? [];
    const mpcRef = refs.find((r) => r.resource === MPC_RESOURCE && r.group === MPC_GROUP);
    // OCM may list a reference with an empty name while it resolves the configs.
    const mpcName = mpcRef?.desiredConfig?.name || mpcRef?.name || DEFAULT_CONFIGURATION;
    const adcRef = refs.find((r) => r.resource === ADC_RESOURCE && r.group === ADDON_GROUP);
    const adcName = adcRef?.desiredConfig?.name ?? adcRef?.name;
    const adcNamespace = adcRef?.desiredConfig?.namespace ?? adcRef?.namespace;
    const adc = adcName && adcNamespace ? this.cache.deploymentConfig(adcNamespace, adcName) : undefined;
    for (const r of refs) {
      const name = r.desiredConfig?.name ?? r.name;
      if (!name) continue;
      const namespace = r.desiredConfig?.namespace ?? r.namespace;
      const obj = configObject(this.cache, {
        group: r.group,
        resource: r.resource,
        name,
        ...(namespace ? { namespace } : {}),
      });
      if (!obj) continue;
      if (obj.metadata.generation !== undefined) r.lastObservedGeneration = obj.metadata.generation;
      const own = mca.spec?.configs?.some(
        (c) => refKey(c) === refKey(r) && c.name === name && (c.namespace ?? "") === (namespace ?? ""),
      );
      if (own && r.desiredConfig) r.desiredConfig.specHash = specHash(obj);
    }
    return { refs, mpcName, adc };
  }

  /**
   * Step: the registration in `status` (supported configs, agent namespace, the agent's subject
   * for our signer, and with entrypoint PortForward its hub client identity; Customized health),
   * and its `RegistrationApplied=True` condition.
   */
  private register(
    cluster: string,
    status: AddonStatus,
    namespace: string,
    agentCa: SigningCa,
    mpc: ManagedProxyConfiguration | undefined,
  ): ConditionInput {
    const throughHub = mpc !== undefined && usesPortForward(mpc.spec);
    status.supportedConfigs = SUPPORTED_CONFIGS;
    status.namespace = namespace;
    status.registrations = [
      { signerName: AGENT_SIGNER, subject: agentSubject(agentCa) },
      ...(throughHub ? [{ signerName: HUB_CLIENT_SIGNER, subject: agentHubSubject(cluster) }] : []),
    ];
    status.healthCheck = { mode: "Customized" };
    return {
      type: "RegistrationApplied",
      status: "True",
      reason: "SetPermissionApplied",
      message: throughHub
        ? `the agent's certificate comes from signer ${AGENT_SIGNER} into namespace ${namespace}; its hub identity (signer ${HUB_CLIENT_SIGNER}, group ${AGENT_HUB_GROUP}) may only reach the proxy-servers in ${mpc.spec.proxyServer.namespace} (entrypoint PortForward: get pods/proxy, list/watch endpointslices)`
        : `the agent's certificate comes from signer ${AGENT_SIGNER} into namespace ${namespace}; the agent gets no hub API rights`,
    };
  }

  /**
   * Step: the agent's ManifestWork, and `ManifestApplied` from it: False (retried in 5 s) when it
   * cannot be rendered yet, else what OCM's work agent reports (`Applied`; nothing before it
   * reports). The cluster's tunnel is probed from here on.
   */
  private async deployAgent(
    mca: ManagedClusterAddOn,
    cluster: string,
    namespace: string,
    configs: AddonConfigs,
    mpc: ManagedProxyConfiguration | undefined,
  ): Promise<{ condition?: ConditionInput; retryAfterMs?: number }> {
    this.prober?.track(cluster, configs.mpcName);
    const problem = await this.applyWork(mca, cluster, namespace, mpc, configs.adc?.spec, configs.refs);
    if (problem)
      return {
        condition: { type: "ManifestApplied", status: "False", reason: "ManifestWorkApplyFailed", message: problem },
        retryAfterMs: 5_000,
      };
    const applied = this.cache.work(cluster)?.status?.conditions?.find((c) => c.type === "Applied");
    if (applied?.status === "True")
      return {
        condition: {
          type: "ManifestApplied",
          status: "True",
          reason: "AddonManifestApplied",
          message: "manifests of addon are applied successfully",
        },
      };
    if (applied?.status === "False")
      return {
        condition: {
          type: "ManifestApplied",
          status: "False",
          reason: "AddonManifestAppliedFailed",
          message: `work ${cluster}/${this.workName()} is not applied: ${applied.message}`,
        },
      };
    return {};
  }

  /**
   * Step: `Available` (Customized health mode is ours to report), unless the hub already says the
   * cluster is Unknown (then nothing: OCM's own Unknown stands).
   */
  private reportHealth(
    mca: ManagedClusterAddOn,
    mc: ManagedCluster,
    mpc: ManagedProxyConfiguration | undefined,
  ): Availability | undefined {
    const clusterAvailable = mc.status?.conditions?.find((c) => c.type === "ManagedClusterConditionAvailable");
    return clusterAvailable?.status !== "Unknown" ? this.health(mca, mpc) : undefined;
  }

  private workName(): string {
    return `addon-${ADDON_NAME}-deploy-0`;
  }

  /** Render and apply the agent's work; returns what is missing when it cannot be rendered. */
  private async applyWork(
    mca: ManagedClusterAddOn,
    cluster: string,
    namespace: string,
    mpc: ManagedProxyConfiguration | undefined,
    adc: AddOnDeploymentConfigSpec | undefined,
    refs: ConfigReference[],
  ): Promise<string | undefined> {
    const rendered = await this.renderWork(mca, cluster, namespace, mpc, adc, refs);
    if (typeof rendered === "string") return rendered;
    await this.writeWork(cluster, rendered);
    return undefined;
  }

  /**
   * The agent's ManifestWork with the hash of its spec in an annotation, from the configuration,
   * its entrypoint and the CA bundles published on the hub; or what is missing to render it.
   */
  private async renderWork(
    mca: ManagedClusterAddOn,
    cluster: string,
    namespace: string,
    mpc: ManagedProxyConfiguration | undefined,
    adc: AddOnDeploymentConfigSpec | undefined,
    refs: ConfigReference[],
  ): Promise<KubeObject | string> {
    if (!mpc)
      return `ManagedProxyConfiguration ${refs.length ? "from the addon's configs" : DEFAULT_CONFIGURATION} does not exist`;
    const entrypoint = mpc.status?.entrypoint;
    if (!entrypoint)
      return `ManagedProxyConfiguration ${mpc.metadata.name} has no status.entrypoint yet (the address agents dial)`;
    const serverNs = mpc.spec.proxyServer.namespace;
    const caSecret = await this.api.tryGet<SecretObject>(Resources.secret, SERVER_CA_SECRET, serverNs);
    const servingCaPem = unb64(caSecret?.data?.["ca.crt"]);
    if (!servingCaPem)
      return `Secret ${serverNs}/${SERVER_CA_SECRET} with the proxy-servers' CA bundle does not exist yet`;
    // The gateway CA bundle, published with the gateway's identity (issued in the same reconcile as
    // proxy-server-ca, so normally present; when not, the agents run without a gateway endpoint and
    // get it once the Secret appears: a change of it requeues every addon).
    const identity = await this.api.tryGet<SecretObject>(Resources.secret, GATEWAY_IDENTITY_SECRET, serverNs);
    const gatewayCaPem = unb64(identity?.data?.["ca.crt"]);
    const configHashes: Record<string, string> = {};
    for (const r of refs) {
      if (!r.desiredConfig) continue;
      configHashes[
        `${r.resource}${r.group ? `.${r.group}` : ""}/${r.desiredConfig.namespace ?? ""}/${r.desiredConfig.name}`
      ] = r.desiredConfig.specHash ?? "";
    }
    const desired = renderAgentWork({
      cluster,
      namespace,
      mpc,
      entrypoint,
      servingCaPem,
      ...(gatewayCaPem ? { gatewayCaPem } : {}),
      ...(this.options.gatewayImpersonationPrefix
        ? { gatewayImpersonationPrefix: this.options.gatewayImpersonationPrefix }
        : {}),
      ...(adc ? { adc } : {}),
      owner: {
        apiVersion: Resources.managedClusterAddOn.apiVersion,
        kind: Resources.managedClusterAddOn.kind,
        name: ADDON_NAME,
        uid: mca.metadata.uid ?? "",
        controller: true,
        blockOwnerDeletion: true,
      },
      configHashes,
    });
    const hash = contentHash([desired.metadata, desired.spec]);
    desired.metadata.annotations = { ...(desired.metadata.annotations ?? {}), [SPEC_HASH_ANNOTATION]: hash };
    return desired;
  }

  /** Create the agent's ManifestWork, or patch it when the hash of its spec changed. */
  private async writeWork(cluster: string, desired: KubeObject): Promise<void> {
    const hash = desired.metadata.annotations?.[SPEC_HASH_ANNOTATION];
    const existing = this.cache.work(cluster);
    if (!existing) {
      try {
        await this.api.create(Resources.manifestWork, desired);
      } catch (err) {
        if ((err as { status?: number }).status !== 409) throw err;
      }
      this.logger.info({ cluster, work: this.workName() }, "created the agent's ManifestWork");
      return;
    }
    if (existing.metadata.annotations?.[SPEC_HASH_ANNOTATION] === hash) return;
    // The annotation map is replaced as a whole by a merge patch only key by key: remove the config hash when gone.
    const annotations: Record<string, string | null> = { ...(desired.metadata.annotations ?? {}) };
    for (const k of Object.keys(existing.metadata.annotations ?? {})) if (!(k in annotations)) annotations[k] = null;
    await this.api.mergePatch(Resources.manifestWork, this.workName(), cluster, {
      metadata: {
        uid: existing.metadata.uid,
        resourceVersion: existing.metadata.resourceVersion,
        labels: desired.metadata.labels,
        annotations,
        ownerReferences: desired.metadata.ownerReferences,
      },
      spec: desired.spec,
    });
    this.logger.info({ cluster, work: this.workName() }, "updated the agent's ManifestWork");
  }

  /**
   * Available from the tunnel probes through every proxy-server replica (tunnel-prober.ts), with
   * what the agents report through the work's status feedback (addon-availability.ts).
   */
  private health(mca: ManagedClusterAddOn, mpc: ManagedProxyConfiguration | undefined): Availability {
    const cluster = mca.metadata.namespace ?? "";
    const rotated = mca.status?.conditions?.find((c) => c.type === CERTIFICATE_ROTATED_CONDITION);
    const csrs = this.cache.csrCount?.(cluster);
    const manifest = this.cache
      .work(cluster)
      ?.status?.resourceStatus?.manifests?.find(
        (m) => m.resourceMeta?.kind === "Deployment" && m.resourceMeta.name === AGENT_DEPLOYMENT,
      );
    const agent = agentFeedback(manifest?.statusFeedback?.values);
    return availability({
      cluster,
      probing: this.prober !== undefined,
      picture: this.prober?.result(cluster),
      ...(this.prober ? { now: this.prober.now() } : {}),
      ...(mpc
        ? {
            configuration: {
              name: mpc.metadata.name,
              serverNamespace: mpc.spec.proxyServer.namespace,
              ...(mpc.spec.proxyAgent?.replicas !== undefined ? { agentReplicas: mpc.spec.proxyAgent.replicas } : {}),
            },
          }
        : {}),
      ...(agent ? { agent } : {}),
      certificate: {
        ...(rotated ? { rotated: { status: rotated.status, reason: rotated.reason, message: rotated.message } } : {}),
        ...(csrs !== undefined ? { csrs } : {}),
        csrLimit: OCM_ADDON_CSR_LIMIT,
        agentSecret: AGENT_CERT_SECRET,
      },
    });
  }

  private async writeStatus(
    mca: ManagedClusterAddOn,
    status: AddonStatus,
    conditions: ConditionInput[],
  ): Promise<void> {
    const now = new Date(this.clock.now());
    const merged = mergeConditions(mca.status?.conditions, conditions, undefined, now);
    const next: Record<string, unknown> = { ...status, conditions: merged };
    const old: Record<string, unknown> = mca.status ?? {};
    const patch: Record<string, unknown> = {};
    for (const key of [
      "supportedConfigs",
      "registrations",
      "namespace",
      "healthCheck",
      "configReferences",
      "conditions",
    ])
      if (next[key] !== undefined && !same(next[key], old[key])) patch[key] = next[key];
    if (Object.keys(patch).length === 0) return;
    await this.api.mergePatch(
      Resources.managedClusterAddOn,
      ADDON_NAME,
      mca.metadata.namespace,
      { metadata: { uid: mca.metadata.uid, resourceVersion: mca.metadata.resourceVersion }, status: patch },
      "status",
    );
  }
}
