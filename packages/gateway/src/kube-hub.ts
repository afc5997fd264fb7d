/**
 * The hub through @kubernetes/client-node: TokenReview and SubjectAccessReview (typed APIs),
 * ManagedCluster lookups (custom objects), the services ConfigMap (a list, then a Watch that is
 * re-listed whenever it ends, with backoff after failures) and Warning Events about it; for the
 * fleet view, ManagedClusters and the ManagedClusterAddOns `cluster-proxy` listed and watched the
 * same way.
 */
import * as k8s from "@kubernetes/client-node";
import { Backoff, silentLogger, type Logger } from "@cluster-proxy/kit";
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
import { errorMessage } from "@cluster-proxy/errors";
import { HUB_REVIEW_TIMEOUT_MS } from "./hub-deadline.js";

function isNotFound(err: unknown): boolean {
  return err instanceof k8s.ApiException && err.code === 404;
}

function userOf(u: k8s.V1UserInfo | undefined): UserInfo | undefined {
  if (!u?.username) return undefined;
  return { username: u.username, ...(u.uid ? { uid: u.uid } : {}), groups: u.groups ?? [], extra: u.extra ?? {} };
}

/** A custom object as a list or a watch gives it, as far as the fleet view reads it. */
interface CustomObject {
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string>; resourceVersion?: string };
  status?: {
    conditions?: { type?: string; status?: string; reason?: string; message?: string; lastTransitionTime?: unknown }[];
  };
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

/** Where a watched list of custom objects lives. */
interface ListSpec<T> {
  what: string;
  group: string;
  version: string;
  plural: string;
  fieldSelector?: string;
  item(obj: CustomObject): T | undefined;
  /** The name a `delete` event carries. */
  key(obj: CustomObject): string | undefined;
}

/**
 * Read, then watch from the version read, again whenever the watch ends (after a failure, with
 * backoff) until the returned function is called. `read` resolves with the resourceVersion to
 * watch from (it is told whether the loop was stopped meanwhile, to hold its news back then);
 * `onEvent` gets the watch's events.
 */
function watchLoop<O>(
  kc: k8s.KubeConfig,
  logger: Logger,
  what: string,
  path: string,
  query: Record<string, string>,
  read: (stopped: () => boolean) => Promise<string | undefined>,
  onEvent: (phase: string, obj: O) => void,
): () => void {
  let stopped = false;
  let abort: AbortController | undefined;
  let timer: NodeJS.Timeout | undefined;
  const backoff = new Backoff({ initialMs: 1_000, capMs: 30_000 });
  const watch = new k8s.Watch(kc);
  const run = async (): Promise<void> => {
    const version = await read(() => stopped);
    if (stopped) return;
    await new Promise<void>((resolve, reject) => {
      watch
        .watch(
          path,
          { ...query, ...(version ? { resourceVersion: version } : {}) },
          (phase: string, obj: O) => {
            backoff.reset();
            if (!stopped) onEvent(phase, obj);
          },
          (err: unknown) => (err ? reject(err instanceof Error ? err : new Error("the watch failed")) : resolve()),
        )
        .then((a) => {
          abort = a;
          if (stopped) a.abort();
        }, reject);
    });
  };
  const loop = (): void => {
    if (stopped) return;
    run().then(
      () => loop(),
      (err: unknown) => {
        if (stopped) return;
        const delay = backoff.next();
        logger.warn({ err: errorMessage(err), retryInMs: delay }, `watch of ${what} failed`);
        timer = setTimeout(loop, delay);
      },
    );
  };
  loop();
  return () => {
    stopped = true;
    clearTimeout(timer);
    abort?.abort();
  };
}

/** List, then watch, the custom objects of `spec` (cluster-wide); see {@link watchLoop}. */
function listWatch<T>(
  kc: k8s.KubeConfig,
  custom: k8s.CustomObjectsApi,
  logger: Logger,
  spec: ListSpec<T>,
  listener: (event: ListEvent<T>) => void,
): () => void {
  const selector: Record<string, string> = spec.fieldSelector ? { fieldSelector: spec.fieldSelector } : {};
  return watchLoop<CustomObject>(
    kc,
    logger,
    spec.what,
    `/apis/${spec.group}/${spec.version}/${spec.plural}`,
    selector,
    async (stopped) => {
      const list = (await custom.listClusterCustomObject({
        group: spec.group,
        version: spec.version,
        plural: spec.plural,
        ...selector,
      })) as { items?: CustomObject[]; metadata?: { resourceVersion?: string } };
      if (!stopped()) listener({ kind: "list", items: (list.items ?? []).flatMap((o) => spec.item(o) ?? []) });
      return list.metadata?.resourceVersion;
    },
    (phase, obj) => {
      if (phase === "DELETED") {
        const name = spec.key(obj);
        if (name) listener({ kind: "delete", name });
      } else if (phase === "ADDED" || phase === "MODIFIED") {
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
      const user = review.status?.authenticated ? userOf(review.status.user) : undefined;
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
        const obj = (await custom.getClusterCustomObject({
          group: "cluster.open-cluster-management.io",
          version: "v1",
          plural: "managedclusters",
          name,
        })) as { metadata?: { labels?: Record<string, string> } };
        return { name, labels: obj.metadata?.labels ?? {} };
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    },
    watchConfigMap(namespace: string, name: string, listener: ConfigMapListener): () => void {
      return watchLoop<k8s.V1ConfigMap>(
        kc,
        logger,
        `ConfigMap ${namespace}/${name}`,
        `/api/v1/namespaces/${namespace}/configmaps`,
        { fieldSelector: `metadata.name=${name}` },
        async () => {
          try {
            const cm = await core.readNamespacedConfigMap({ name, namespace });
            listener(cm.data ?? {});
            return cm.metadata?.resourceVersion;
          } catch (err) {
            if (!isNotFound(err)) throw err;
            listener(undefined);
            return undefined;
          }
        },
        (phase, obj) => {
          if (phase === "DELETED") listener(undefined);
          else if (phase === "ADDED" || phase === "MODIFIED") listener(obj.data ?? {});
        },
      );
    },
    watchManagedClusters(listener: (event: ListEvent<ManagedClusterInfo>) => void): () => void {
      return listWatch(
        kc,
        custom,
        logger,
        {
          what: "ManagedClusters",
          group: "cluster.open-cluster-management.io",
          version: "v1",
          plural: "managedclusters",
          item: clusterOf,
          key: (o) => o.metadata?.name,
        },
        listener,
      );
    },
    watchAddOns(name: string, listener: (event: ListEvent<AddOnInfo>) => void): () => void {
      return listWatch(
        kc,
        custom,
        logger,
        {
          what: `ManagedClusterAddOns ${name}`,
          group: "addon.open-cluster-management.io",
          version: "v1alpha1",
          plural: "managedclusteraddons",
          fieldSelector: `metadata.name=${name}`,
          item: addOnOf,
          key: (o) => o.metadata?.namespace,
        },
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
