/**
 * The access provider `cluster-proxy` on SIG-Multicluster ClusterProfiles: one entry per profile of a
 * cluster with the addon, pointing at the gateway. Guide: docs/guides/cluster-profile.md
 * Design: docs/design/addon-manager.md#part-3-clusterprofiles---cluster-profiles
 */
import { isDeepStrictEqual } from "node:util";
import {
  KubeApiError,
  type EventRecorder,
  type KubeApi,
  type KubeObject,
  type ControllerSpec,
  type ReconcileResult,
  type ResourceRef,
} from "@cluster-proxy/kube";
import { GATEWAY_PORT, GATEWAY_SERVICE } from "@cluster-proxy/api";
import type { Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** The ClusterProfile API as OCM v1.2.1 serves it. */
export const ClusterProfileResource: ResourceRef<ClusterProfile> = {
  apiVersion: "multicluster.x-k8s.io/v1alpha1",
  kind: "ClusterProfile",
  plural: "clusterprofiles",
  namespaced: true,
};

/** Our provider's name in `status.accessProviders`; consumers name it in their provider file. */
export const ACCESS_PROVIDER_NAME = "cluster-proxy";
/** The kubeconfig cluster extension handed to exec plugins as `spec.cluster.config` (KEP-5339). */
export const EXEC_EXTENSION = "client.authentication.k8s.io/exec";
/** Label of the ClusterProfile's cluster manager; OCM's profiles say `open-cluster-management`. */
export const CLUSTER_MANAGER_LABEL = "x-k8s.io/cluster-manager";
export const OCM_CLUSTER_MANAGER = "open-cluster-management";
/** Label naming the ManagedCluster a profile describes (OCM sets it). */
export const PROFILE_CLUSTER_LABEL = "open-cluster-management.io/cluster-name";
/** Reason of the Warning Event recorded on a profile that could not be updated. */
export const PROFILE_UPDATE_FAILED = "AccessProviderUpdateFailed";

/** `extensions[].extension` of our entry: what `cluster-proxy credential` reads. */
export interface ExecExtension {
  /** The managed cluster the entry reaches. */
  cluster: string;
}

/** A kubeconfig `Cluster` (clientcmd v1) as the ClusterProfile API embeds it. */
export interface KubeconfigCluster {
  server: string;
  "certificate-authority-data"?: string;
  "tls-server-name"?: string;
  "proxy-url"?: string;
  extensions?: { name: string; extension: unknown }[];
  [key: string]: unknown;
}

/** One entry of `status.accessProviders`. */
export interface AccessProvider {
  name: string;
  cluster: KubeconfigCluster;
}

/** The ClusterProfile fields the manager reads and writes. */
export interface ClusterProfile extends KubeObject {
  status?: {
    accessProviders?: AccessProvider[];
    credentialProviders?: AccessProvider[];
    [key: string]: unknown;
  };
}

/** Where the gateway is and what verifies it. */
export interface GatewayEndpoint {
  /** Base URL, e.g. `https://cluster-proxy-addon-user.open-cluster-management-addon.svc:9092`. */
  url: string;
  /** The serving CA bundle (PEM). */
  caBundle: string;
}

/** The gateway's default base URL: its Service in the proxy-servers' namespace. */
export function defaultGatewayUrl(namespace: string): string {
  return `https://${GATEWAY_SERVICE}.${namespace}.svc:${GATEWAY_PORT}`;
}

/** A ClusterProfile's key: `<namespace>/<name>`. */
export type ProfileKey = `${string}/${string}`;
export const profileKey = (p: KubeObject): ProfileKey => `${p.metadata.namespace ?? ""}/${p.metadata.name}`;

/** The managed cluster an OCM ClusterProfile describes, or undefined for any other profile. */
export function profileCluster(profile: KubeObject): string | undefined {
  const labels = profile.metadata.labels ?? {};
  if (labels[CLUSTER_MANAGER_LABEL] !== OCM_CLUSTER_MANAGER) return undefined;
  const cluster = labels[PROFILE_CLUSTER_LABEL];
  return cluster ? cluster : undefined;
}

/** Our entry for `cluster`, reaching it through the gateway at `gateway`. */
export function desiredAccessProvider(cluster: string, gateway: GatewayEndpoint): AccessProvider {
  const extension: ExecExtension = { cluster };
  return {
    name: ACCESS_PROVIDER_NAME,
    cluster: {
      server: `${gateway.url.replace(/\/+$/, "")}/${cluster}`,
      "certificate-authority-data": Buffer.from(gateway.caBundle).toString("base64"),
      extensions: [{ name: EXEC_EXTENSION, extension }],
    },
  };
}

/** `list` with our entry replaced by `desired` (in place, else appended) or removed (undefined). */
function withEntry(list: readonly AccessProvider[], desired: AccessProvider | undefined): AccessProvider[] {
  const at = list.findIndex((p) => p.name === ACCESS_PROVIDER_NAME);
  const others = list.filter((p) => p.name !== ACCESS_PROVIDER_NAME);
  if (!desired) return others;
  if (at < 0) return [...others, desired];
  return [...others.slice(0, at), desired, ...others.slice(at)];
}

/**
 * The status merge patch that makes `profile` carry `desired` as our entry in both lists (or none,
 * when undefined), keeping every other entry; undefined when nothing changes. An emptied list is
 * removed (`null`). The patch carries uid and resourceVersion, so it fails (409) if the profile
 * changed since it was read.
 */
export function accessProviderPatch(
  profile: ClusterProfile,
  desired: AccessProvider | undefined,
): Record<string, unknown> | undefined {
  const status: Record<string, AccessProvider[] | null> = {};
  for (const field of ["accessProviders", "credentialProviders"] as const) {
    const current = profile.status?.[field] ?? [];
    const next = withEntry(current, desired);
    if (isDeepStrictEqual(next, current)) continue;
    status[field] = next.length > 0 ? next : null;
  }
  if (Object.keys(status).length === 0) return undefined;
  return {
    metadata: { uid: profile.metadata.uid, resourceVersion: profile.metadata.resourceVersion },
    status,
  };
}

/** What the reconciler reads from the manager's caches. */
export interface ClusterProfileCache {
  profile(namespace: string, name: string): ClusterProfile | undefined;
  /** Whether the addon is installed in `cluster` (its ManagedClusterAddOn exists and is not being deleted). */
  addonInstalled(cluster: string): boolean;
  /** The proxy-servers' namespace of the configuration the addon of `cluster` uses (undefined: unknown yet). */
  gatewayNamespace(cluster: string): string | undefined;
  /** The serving CA bundle (PEM) of the gateway in `namespace` (undefined: not issued yet). */
  gatewayCaBundle(namespace: string): string | undefined;
}

export interface ClusterProfileOptions {
  /** Base URL of the gateway in every entry (empty: {@link defaultGatewayUrl} of the proxy-servers' namespace). */
  gatewayUrl: string;
}

/** The `profiles` controller's reconciler: one ClusterProfile (key `<namespace>/<name>`). */
export class ClusterProfileReconciler implements ControllerSpec<ProfileKey> {
  readonly what = "ClusterProfile reconcile";
  /** The last failure recorded as an Event per profile, so a retried failure is recorded once. */
  private readonly reported = new Map<string, string>();

  constructor(
    private readonly api: KubeApi,
    private readonly cache: ClusterProfileCache,
    private readonly events: EventRecorder,
    private readonly options: ClusterProfileOptions,
    private readonly log: Logger,
  ) {}

  logFields(key: ProfileKey): Record<string, unknown> {
    return { clusterProfile: key };
  }

  /** The entry the profile should carry now: undefined to remove it, "wait" when the gateway's CA is not known yet. */
  desired(profile: ClusterProfile): AccessProvider | undefined | "wait" {
    const cluster = profileCluster(profile);
    if (!cluster || !this.cache.addonInstalled(cluster)) return undefined;
    const namespace = this.cache.gatewayNamespace(cluster);
    if (!namespace) return "wait";
    const caBundle = this.cache.gatewayCaBundle(namespace);
    if (!caBundle) return "wait";
    return desiredAccessProvider(cluster, { url: this.options.gatewayUrl || defaultGatewayUrl(namespace), caBundle });
  }

  async reconcile(key: ProfileKey): Promise<ReconcileResult> {
    const [namespace = "", name = ""] = key.split("/");
    const profile = this.cache.profile(namespace, name);
    if (!profile) {
      this.reported.delete(key);
      return;
    }
    const desired = this.desired(profile);
    // Until the gateway's certificate is issued there is nothing true to publish; its Secret's
    // watch event brings the key back.
    if (desired === "wait") return;
    const patch = accessProviderPatch(profile, desired);
    if (!patch) return;
    try {
      await this.api.mergePatch(ClusterProfileResource, name, namespace, patch, "status");
      this.reported.delete(key);
      this.log.info(
        { clusterProfile: key, provider: ACCESS_PROVIDER_NAME, present: desired !== undefined },
        desired ? "ClusterProfile access provider written" : "ClusterProfile access provider removed",
      );
    } catch (err) {
      // A conflict is routine (another writer was first; retried from the fresh object).
      if (!(err instanceof KubeApiError && err.status === 409)) await this.report(key, profile, err);
      throw err;
    }
  }

  private async report(key: string, profile: ClusterProfile, err: unknown): Promise<void> {
    const message = `cannot write access provider ${ACCESS_PROVIDER_NAME} to ClusterProfile ${key}: ${errorMessage(err)}`;
    if (this.reported.get(key) === message) return;
    this.reported.set(key, message);
    await this.events.record(
      { apiVersion: ClusterProfileResource.apiVersion, kind: ClusterProfileResource.kind, metadata: profile.metadata },
      "Warning",
      PROFILE_UPDATE_FAILED,
      message,
    );
  }
}
