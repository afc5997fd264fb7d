/**
 * The hub: TokenReview and SubjectAccessReview (typed APIs of @kubernetes/client-node), ManagedCluster
 * lookups, Warning Events about the services ConfigMap, and, through @cluster-proxy/kube's supervised
 * watches, the services ConfigMap and, for the fleet view, the ManagedClusters and the
 * ManagedClusterAddOns `cluster-proxy`: listed, then watched, re-listed whenever a watch ends.
 */
import * as k8s from "@kubernetes/client-node";
import { HubResources } from "@cluster-proxy/api";
import {
  KubeApi,
  KubeResources,
  SupervisedWatch,
  typedResource,
  type KubeObject,
  type ResourceRef,
} from "@cluster-proxy/kube";
import { silentLogger, type Logger } from "@cluster-proxy/kit";
import type {
  AddOnCondition,
  AddOnInfo,
  ConfigMapListener,
  HubApi,
  ListEvent,
  ManagedClusterInfo,
  ResourceAttributes,
  TokenReviewResult,
  UserInfo,
} from "./hub-api.js";
import { HUB_REVIEW_TIMEOUT_MS } from "./hub-deadline.js";

function isNotFound(err: unknown): boolean {
  return err instanceof k8s.ApiException && err.code === 404;
}

const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");

/**
 * The user of an authenticated TokenReview. client-node does not check the types of what it
 * parses (`"authenticated": "false"` arrives as a string, a numeric username as a number), so
 * every field is checked here: an answer of any other shape is an error (503), never a user.
 */
function userOf(status: k8s.V1TokenReviewStatus | undefined): UserInfo | undefined {
  const authenticated: unknown = status?.authenticated;
  if (authenticated === undefined || authenticated === false) return undefined;
  const u: unknown = status?.user;
  if (authenticated !== true || typeof u !== "object" || u === null)
    throw new Error("the hub apiserver answered a TokenReview of an unexpected shape (authenticated, user)");
  const { username, uid, groups, extra } = u as Record<string, unknown>;
  const extras = extra === undefined || extra === null ? {} : extra;
  if (
    typeof username !== "string" ||
    username === "" ||
    (uid !== undefined && uid !== null && typeof uid !== "string") ||
    (groups !== undefined && groups !== null && !isStrings(groups)) ||
    typeof extras !== "object" ||
    !Object.values(extras).every(isStrings)
  )
    throw new Error("the hub apiserver answered a TokenReview of an unexpected shape (user)");
  return {
    username,
    ...(typeof uid === "string" && uid !== "" ? { uid } : {}),
    groups: groups ?? [],
    extra: extras as Record<string, string[]>,
  };
}

/** A ManagedCluster or ManagedClusterAddOn as far as the fleet view reads it. */
interface CustomObject extends KubeObject {
  status?: {
    conditions?: { type?: string; status?: string; reason?: string; message?: string; lastTransitionTime?: unknown }[];
  };
}

/** A ConfigMap as far as the gateway reads it. */
interface ConfigMapObject extends KubeObject {
  data?: Record<string, string>;
}

function clusterOf(obj: CustomObject): ManagedClusterInfo | undefined {
  const name = obj.metadata?.name;
  return name ? { name, labels: obj.metadata?.labels ?? {} } : undefined;
}

function addOnOf(obj: CustomObject): AddOnInfo | undefined {
  const cluster = obj.metadata?.namespace;
  if (!cluster) return undefined;
  const c = obj.status?.conditions?.find((x) => x.type === "Available");
  const status = c?.status === "True" || c?.status === "False" ? c.status : "Unknown";
  const at = c?.lastTransitionTime;
  const available: AddOnCondition | undefined = c
    ? {
        status,
        reason: c.reason ?? "",
        message: c.message ?? "",
        ...(typeof at === "string"
          ? { lastTransitionTime: at }
          : at instanceof Date
            ? { lastTransitionTime: at.toISOString() }
            : {}),
      }
    : undefined;
  return { cluster, ...(available ? { available } : {}) };
}

/** The pause after a failed list or watch: doubling from 1 s up to 30 s. */
const WATCH_RETRY = { initialMs: 1_000, capMs: 30_000 };

/**
 * Follow the `T`s of `resource` that `selection` selects until the returned function is called:
 * `onList` gets every (re)list whole, `onEvent` the watch's changes in between.
 */
function follow<T extends KubeObject>(
  api: KubeApi,
  logger: Logger,
  resource: ResourceRef<T>,
  selection: { namespace?: string; fieldSelector?: string },
  onList: (items: T[]) => void,
  onEvent: (type: "ADDED" | "MODIFIED" | "DELETED", obj: T) => void,
): () => void {
  const stop = new AbortController();
  const watch = new SupervisedWatch(api, resource, { ...selection, onList, retry: WATCH_RETRY }, onEvent, logger);
  void watch.run(stop.signal);
  return () => stop.abort();
}

/** Follow the `T`s of `resource` (cluster-wide) as {@link ListEvent}s of what `item` makes of them. */
function listWatch<T>(
  api: KubeApi,
  logger: Logger,
  resource: ResourceRef<CustomObject>,
  spec: {
    fieldSelector?: string;
    item(obj: CustomObject): T | undefined;
    /** The name a `delete` event carries. */
    key(obj: CustomObject): string | undefined;
  },
  listener: (event: ListEvent<T>) => void,
): () => void {
  return follow(
    api,
    logger,
    resource,
    spec.fieldSelector ? { fieldSelector: spec.fieldSelector } : {},
    (items) => listener({ kind: "list", items: items.flatMap((o) => spec.item(o) ?? []) }),
    (type, obj) => {
      if (type === "DELETED") {
        const name = spec.key(obj);
        if (name) listener({ kind: "delete", name });
      } else {
        const item = spec.item(obj);
        if (item) listener({ kind: "set", item });
      }
    },
  );
}

/** `p`, or a rejection naming `what` when it has not settled within `ms`. */
function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the hub apiserver did not answer the ${what} within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/**
 * A {@link HubApi} for the hub `kc` points at; each review call fails after `reviewTimeoutMs` (a
 * call may serve several requests; each request also has one deadline for all its reviews,
 * `hub-deadline.ts`).
 */
export function kubeHubApi(
  kc: k8s.KubeConfig,
  logger: Logger = silentLogger,
  reviewTimeoutMs = HUB_REVIEW_TIMEOUT_MS,
): HubApi {
  const authn = kc.makeApiClient(k8s.AuthenticationV1Api);
  const authz = kc.makeApiClient(k8s.AuthorizationV1Api);
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const api = new KubeApi(kc);
  return {
    async tokenReview(token: string, audiences?: readonly string[]): Promise<TokenReviewResult> {
      const review = await withDeadline(
        authn.createTokenReview({
          body: {
            apiVersion: "authentication.k8s.io/v1",
            kind: "TokenReview",
            spec: { token, ...(audiences ? { audiences: [...audiences] } : {}) },
          },
        }),
        reviewTimeoutMs,
        "TokenReview",
      );
      const user = userOf(review.status);
      if (!user) return {};
      const granted = review.status?.audiences ?? [];
      return { user, ...(granted.length > 0 ? { audiences: granted } : {}) };
    },
    async subjectAccessReview(user: UserInfo, a: ResourceAttributes) {
      const review = await withDeadline(
        authz.createSubjectAccessReview({
          body: {
            apiVersion: "authorization.k8s.io/v1",
            kind: "SubjectAccessReview",
            spec: {
              user: user.username,
              groups: user.groups,
              ...(user.uid ? { uid: user.uid } : {}),
              extra: user.extra,
              resourceAttributes: { ...a },
            },
          },
        }),
        reviewTimeoutMs,
        "SubjectAccessReview",
      );
      return {
        allowed: review.status?.allowed === true,
        ...(review.status?.reason ? { reason: review.status.reason } : {}),
      };
    },
    async managedCluster(name: string): Promise<ManagedClusterInfo | undefined> {
      try {
        const obj = (await withDeadline(
          custom.getClusterCustomObject({
            group: "cluster.open-cluster-management.io",
            version: "v1",
            plural: "managedclusters",
            name,
          }),
          reviewTimeoutMs,
          "ManagedCluster lookup",
        )) as { metadata?: { labels?: Record<string, string> } };
        return { name, labels: obj.metadata?.labels ?? {} };
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    },
    watchConfigMap(namespace: string, name: string, listener: ConfigMapListener): () => void {
      return follow(
        api,
        logger,
        typedResource<ConfigMapObject>(KubeResources.configMap),
        { namespace, fieldSelector: `metadata.name=${name}` },
        (items) => listener(items[0] ? (items[0].data ?? {}) : undefined),
        (type, obj) => listener(type === "DELETED" ? undefined : (obj.data ?? {})),
      );
    },
    watchManagedClusters(listener: (event: ListEvent<ManagedClusterInfo>) => void): () => void {
      return listWatch(
        api,
        logger,
        typedResource<CustomObject>(HubResources.managedCluster),
        { item: clusterOf, key: (o) => o.metadata.name },
        listener,
      );
    },
    watchAddOns(name: string, listener: (event: ListEvent<AddOnInfo>) => void): () => void {
      return listWatch(
        api,
        logger,
        typedResource<CustomObject>(HubResources.managedClusterAddOn),
        { fieldSelector: `metadata.name=${name}`, item: addOnOf, key: (o) => o.metadata.namespace },
        listener,
      );
    },
    async configMapEvent(namespace: string, name: string, reason: string, message: string): Promise<void> {
      const now = new Date();
      await core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { generateName: `${name}.`, namespace },
          involvedObject: { apiVersion: "v1", kind: "ConfigMap", name, namespace },
          reason,
          message,
          type: "Warning",
          source: { component: "cluster-proxy-gateway" },
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
          reportingComponent: "cluster-proxy-gateway",
        },
      });
    },
  };
}
