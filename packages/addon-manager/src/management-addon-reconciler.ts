/**
 * The `managementAddOn` controller: the one ClusterManagementAddOn `cluster-proxy`, created when
 * missing and given the spec hashes of its config references.
 * Design: docs/design/addon-manager.md#modules
 */
import { ADDON_NAME } from "@cluster-proxy/api";
import type { ControllerSpec, KubeApi, KubeObject, ReconcileResult } from "@cluster-proxy/kube";
import type { Logger } from "@cluster-proxy/kit";
import {
  ADC_RESOURCE,
  ADDON_GROUP,
  DEFAULT_CONFIGURATION,
  MPC_GROUP,
  MPC_RESOURCE,
  configObject,
  same,
  type AddonCache,
  type ConfigReference,
} from "./addon-reconciler.js";
import { specHash } from "./agent-manifests.js";
import { Resources } from "./resources.js";

/** What the reconciler reads from the manager's caches. */
export type ManagementAddOnCache = Pick<AddonCache, "managementAddOn" | "configuration" | "deploymentConfig">;

export interface ManagementAddOnOptions {
  /** `<namespace>/<name>` of the Placement of a ClusterManagementAddOn the manager creates ("": Manual). */
  installPlacement?: string;
}

/**
 * The ClusterManagementAddOn the manager creates when it is missing: install strategy Placements
 * over `placement` (`<namespace>/<name>`: OCM gives every cluster it selects, now or later, a
 * ManagedClusterAddOn), or Manual without one (a ManagedClusterAddOn per cluster by hand). Either
 * way a ManagedClusterAddOn created by hand works.
 */
export function clusterManagementAddOn(placement = ""): KubeObject {
  const [namespace, name] = placement.split("/") as [string, string | undefined];
  return {
    apiVersion: Resources.clusterManagementAddOn.apiVersion,
    kind: Resources.clusterManagementAddOn.kind,
    metadata: { name: ADDON_NAME, annotations: { "addon.open-cluster-management.io/lifecycle": "addon-manager" } },
    spec: {
      addOnMeta: {
        displayName: "cluster-proxy",
        description: "Reach every managed cluster's network (its kube-apiserver first) from the hub through a tunnel",
      },
      supportedConfigs: [
        { group: MPC_GROUP, resource: MPC_RESOURCE, defaultConfig: { name: DEFAULT_CONFIGURATION } },
        { group: ADDON_GROUP, resource: ADC_RESOURCE },
      ],
      installStrategy:
        placement && name ? { type: "Placements", placements: [{ name, namespace }] } : { type: "Manual" },
    },
  };
}

/** The `managementAddOn` controller's reconciler (its one key is the addon's name). */
export class ManagementAddOnReconciler implements ControllerSpec<typeof ADDON_NAME> {
  readonly what = "addon reconcile";
  /** The ClusterManagementAddOn existed during this term (so its absence is a deletion). */
  private managementAddOnSeen = false;
  private toldDeleted = false;

  constructor(
    private readonly api: KubeApi,
    private readonly cache: ManagementAddOnCache,
    private readonly options: ManagementAddOnOptions,
    private readonly logger: Logger,
  ) {}

  logFields(): Record<string, unknown> {
    return { key: "cma" };
  }

  /** Create the ClusterManagementAddOn when missing ({@link missing}); fill the spec hashes of its config references. */
  async reconcile(): Promise<ReconcileResult> {
    const cma = this.cache.managementAddOn();
    if (!cma) return this.missing();
    this.managementAddOnSeen = true;
    this.toldDeleted = false;
    if (!cma.status) return;
    const status = structuredClone(cma.status);
    const fill = (group: string, resource: string, desired: ConfigReference["desiredConfig"]): void => {
      if (!desired?.name) return;
      const obj = configObject(this.cache, {
        group,
        resource,
        name: desired.name,
        ...(desired.namespace ? { namespace: desired.namespace } : {}),
      });
      if (obj) desired.specHash = specHash(obj);
    };
    for (const r of status.defaultconfigReferences ?? []) fill(r.group, r.resource, r.desiredConfig);
    for (const p of status.installProgressions ?? [])
      for (const r of p.configReferences ?? []) fill(r.group, r.resource, r.desiredConfig);
    if (same(status, cma.status)) return;
    await this.api.mergePatch(
      Resources.clusterManagementAddOn,
      ADDON_NAME,
      undefined,
      {
        metadata: { uid: cma.metadata.uid, resourceVersion: cma.metadata.resourceVersion },
        status: {
          defaultconfigReferences: status.defaultconfigReferences ?? null,
          installProgressions: status.installProgressions ?? null,
        },
      },
      "status",
    );
  }

  /**
   * Step: create the ClusterManagementAddOn, unless it existed during this term: deleted while we
   * run, that is an uninstall (OCM and the garbage collector remove every addon it owns, and with
   * them the agents). Recreating it at once would let OCM hand the addons to the new one before
   * they are collected; a restarted manager creates it again.
   */
  private async missing(): Promise<void> {
    if (this.managementAddOnSeen) {
      if (!this.toldDeleted)
        this.logger.warn(
          { addon: ADDON_NAME },
          "the ClusterManagementAddOn was deleted: its addons and agents are being removed; restart the manager to create it again",
        );
      this.toldDeleted = true;
      return;
    }
    try {
      await this.api.create(Resources.clusterManagementAddOn, clusterManagementAddOn(this.options.installPlacement));
      this.logger.info({ addon: ADDON_NAME }, "created the ClusterManagementAddOn");
    } catch (err) {
      if ((err as { status?: number }).status !== 409) throw err;
    }
  }
}
