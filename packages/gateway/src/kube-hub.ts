/**
 * The hub, through @cluster-proxy/kube's client: TokenReview and SubjectAccessReview, ManagedCluster
 * lookups (each aborted, its HTTP request closed, at its timeout or when its caller's signal
 * aborts), Warning Events about the services ConfigMap, and, through supervised watches, the services ConfigMap and, for the fleet view, the ManagedClusters and the
 * ManagedClusterAddOns `cluster-proxy`: listed, then watched, re-listed whenever a watch ends.
 */
import { HubResources } from "@cluster-proxy/api";
import {
  KubeApi,
  KubeResources,
  SupervisedWatch,
  isNotFound,
  typedResource,
  type KubeApiConfig,
  type KubeObject,
  type ResourceRef,
} from "@cluster-proxy/kube";
import { realClock, silentLogger, type Logger, type Timers } from "@cluster-proxy/kit";
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

const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

const isStringRecord = (v: unknown): v is Record<string, string> =>
  isRecord(v) && Object.values(v).every((x) => typeof x === "string");

const isStringListRecord = (v: unknown): v is Record<string, string[]> =>
  isRecord(v) && Object.values(v).every(isStrings);

/**
 * The `status` of the object the hub answered a `what` with (undefined when it has none): an
 * answer that is not an object, or a status that is not one, is an error (503).
 */
function statusOf(body: unknown, what: string): Record<string, unknown> | undefined {
  if (!isRecord(body)) throw new Error(`the hub apiserver answered a ${what} that is not an object`);
  const status = body.status;
  if (status === undefined) return undefined;
  if (!isRecord(status)) throw new Error(`the hub apiserver answered a ${what} of an unexpected shape (status)`);
  return status;
}

/**
 * The user of an authenticated TokenReview. The JSON of the answer is not trusted to have the
 * types the API documents (`"authenticated": "false"` as a string, a numeric username), so every
 * field is checked here: an answer of any other shape is an error (503), never a user.
 */
function userOf(status: Record<string, unknown> | undefined): UserInfo | undefined {
  const authenticated: unknown = status?.authenticated;
  if (authenticated === undefined || authenticated === false) return undefined;
  const u: unknown = status?.user;
  if (authenticated !== true || !isRecord(u))
    throw new Error("the hub apiserver answered a TokenReview of an unexpected shape (authenticated, user)");
  const { username, uid, groups, extra } = u;
  const extras = extra === undefined || extra === null ? {} : extra;
  if (
    typeof username !== "string" ||
    username === "" ||
    (uid !== undefined && uid !== null && typeof uid !== "string") ||
    (groups !== undefined && groups !== null && !isStrings(groups)) ||
    !isStringListRecord(extras)
  )
    throw new Error("the hub apiserver answered a TokenReview of an unexpected shape (user)");
  return {
    username,
    ...(typeof uid === "string" && uid !== "" ? { uid } : {}),
    groups: groups ?? [],
    extra: extras,
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

/**
 * `run(signal)`, where `signal` aborts after `ms` (a rejection naming `what`) or when `caller`
 * does (its reason): the request `run` makes with it is closed then, its socket freed. The timer
 * is `timers`'.
 */
async function bounded<T>(
  what: string,
  ms: number,
  caller: AbortSignal | undefined,
  run: (signal: AbortSignal) => Promise<T>,
  timers: Timers,
): Promise<T> {
  const timeout = new AbortController();
  const timer = timers.setTimeout(
    () => timeout.abort(new Error(`the hub apiserver did not answer the ${what} within ${ms} ms`)),
    ms,
  );
  const signal = caller ? AbortSignal.any([caller, timeout.signal]) : timeout.signal;
  try {
    return await run(signal);
  } catch (err) {
    if (!signal.aborted) throw err;
    const reason: unknown = signal.reason;
    throw reason instanceof Error ? reason : new Error(`the ${what} was aborted`, { cause: err });
  } finally {
    timers.clearTimeout(timer);
  }
}

/** The labels of a ManagedCluster the hub answered; any other shape is an error (503). */
function labelsOf(body: unknown): Record<string, string> {
  const metadata = isRecord(body) ? body.metadata : undefined;
  if (!isRecord(metadata)) throw new Error("the hub apiserver answered a ManagedCluster without metadata");
  const labels = metadata.labels ?? {};
  if (!isStringRecord(labels))
    throw new Error("the hub apiserver answered a ManagedCluster of an unexpected shape (labels)");
  return labels;
}

/**
 * A {@link HubApi} for the hub `kc` points at (a @kubernetes/client-node `KubeConfig`, or any
 * {@link KubeApiConfig}); each review call fails after `reviewTimeoutMs` (a call may serve several
 * requests; each request also has one deadline for all its reviews, `hub-deadline.ts`, whose
 * signal aborts the calls it waits for), and its HTTP request is closed then. Those timeouts run
 * on `timers` (default the kit's `realClock`).
 */
export function kubeHubApi(
  kc: KubeApiConfig,
  logger: Logger = silentLogger,
  reviewTimeoutMs = HUB_REVIEW_TIMEOUT_MS,
  timers: Timers = realClock,
): HubApi {
  const api = new KubeApi(kc);
  /** POST a review (`kind`) to `path` under the per-call timeout; its `status`, checked for shape. */
  const review = async (kind: string, path: string, body: unknown, signal?: AbortSignal) =>
    statusOf(
      await bounded(kind, reviewTimeoutMs, signal, (s) => api.request("POST", path, body, undefined, s), timers),
      kind,
    );
  return {
    async tokenReview(token: string, audiences?: readonly string[], signal?: AbortSignal): Promise<TokenReviewResult> {
      const body = {
        apiVersion: "authentication.k8s.io/v1",
        kind: "TokenReview",
        spec: { token, ...(audiences ? { audiences: [...audiences] } : {}) },
      };
      const status = await review("TokenReview", "/apis/authentication.k8s.io/v1/tokenreviews", body, signal);
      const user = userOf(status);
      if (!user) return {};
      const granted = status?.audiences ?? [];
      if (!isStrings(granted))
        throw new Error("the hub apiserver answered a TokenReview of an unexpected shape (audiences)");
      return { user, ...(granted.length > 0 ? { audiences: granted } : {}) };
    },
    async subjectAccessReview(user: UserInfo, a: ResourceAttributes, signal?: AbortSignal) {
      const body = {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: user.username,
          groups: user.groups,
          ...(user.uid ? { uid: user.uid } : {}),
          extra: user.extra,
          resourceAttributes: { ...a },
        },
      };
      const status = await review(
        "SubjectAccessReview",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body,
        signal,
      );
      const reason = status?.reason;
      return {
        allowed: status?.allowed === true,
        ...(typeof reason === "string" && reason !== "" ? { reason } : {}),
      };
    },
    async managedCluster(name: string, signal?: AbortSignal): Promise<ManagedClusterInfo | undefined> {
      try {
        const obj = await bounded(
          "ManagedCluster lookup",
          reviewTimeoutMs,
          signal,
          (s) => api.request("GET", KubeApi.objectPath(HubResources.managedCluster, name), undefined, undefined, s),
          timers,
        );
        return { name, labels: labelsOf(obj) };
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
      const now = new Date().toISOString();
      await api.request("POST", KubeApi.collectionPath(KubeResources.event, namespace), {
        apiVersion: "v1",
        kind: "Event",
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
      });
    },
  };
}
