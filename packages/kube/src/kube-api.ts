/**
 * A small JSON client of the Kubernetes API: get, list, watch, server-side apply, status
 * replace and delete by path. Authentication and TLS come from its {@link KubeApiConfig} (a
 * @kubernetes/client-node KubeConfig: kubeconfig file, in-cluster service account, exec plugins);
 * requests are plain `https.request`s so content types, subresources and watch streams are exactly
 * what the apiserver documents.
 */
import type * as NodeHttp from "node:http";
import https from "node:https";
import * as http from "@cluster-proxy/kit/http";
import { ClusterProxyError, ErrorCodes, errorMessage } from "@cluster-proxy/errors";

/** A Kubernetes object as JSON. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: OwnerReference[];
    deletionTimestamp?: string;
    creationTimestamp?: string;
  };
  [key: string]: unknown;
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** Where a kind lives in the API. */
/**
 * A resource of the API. `T` is the type of its objects (type-level only): a list, a watch and a
 * supervised watch's cache of `ResourceRef<T>` hold `T`s, so callers need no cast
 * ({@link typedResource} names it for a resource of {@link Resources}).
 */
export interface ResourceRef<T extends KubeObject = KubeObject> {
  /** `v1` or `group/version`. */
  apiVersion: string;
  kind: string;
  /** Lower-case plural, e.g. `deployments`. */
  plural: string;
  namespaced: boolean;
  /** Type-level only: the type of the resource's objects. */
  readonly objectType?: T;
}

/** `ref` with the type of its objects: `typedResource<CsrObject>(Resources.certificateSigningRequest)`. */
export function typedResource<T extends KubeObject>(ref: ResourceRef): ResourceRef<T> {
  return { apiVersion: ref.apiVersion, kind: ref.kind, plural: ref.plural, namespaced: ref.namespaced };
}

/** The Kubernetes resources the runtime and the reconcilers use, by name. */
export const KubeResources = {
  namespace: { apiVersion: "v1", kind: "Namespace", plural: "namespaces", namespaced: false },
  secret: { apiVersion: "v1", kind: "Secret", plural: "secrets", namespaced: true },
  configMap: { apiVersion: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true },
  pod: { apiVersion: "v1", kind: "Pod", plural: "pods", namespaced: true },
  service: { apiVersion: "v1", kind: "Service", plural: "services", namespaced: true },
  serviceAccount: { apiVersion: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true },
  event: { apiVersion: "v1", kind: "Event", plural: "events", namespaced: true },
  deployment: { apiVersion: "apps/v1", kind: "Deployment", plural: "deployments", namespaced: true },
  endpointSlice: {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    plural: "endpointslices",
    namespaced: true,
  },
  podDisruptionBudget: {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    plural: "poddisruptionbudgets",
    namespaced: true,
  },
  lease: { apiVersion: "coordination.k8s.io/v1", kind: "Lease", plural: "leases", namespaced: true },
  clusterRole: {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRole",
    plural: "clusterroles",
    namespaced: false,
  },
  roleBinding: {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    plural: "rolebindings",
    namespaced: true,
  },
  certificateSigningRequest: {
    apiVersion: "certificates.k8s.io/v1",
    kind: "CertificateSigningRequest",
    plural: "certificatesigningrequests",
    namespaced: false,
  },
} as const satisfies Record<string, ResourceRef>;

/** The apiserver answered with an error status. */
export class KubeApiError extends ClusterProxyError<typeof ErrorCodes.kubeApi> {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(ErrorCodes.kubeApi, message, options);
    this.name = "KubeApiError";
  }
}

export const isNotFound = (err: unknown): boolean => err instanceof KubeApiError && err.status === 404;
export const isConflict = (err: unknown): boolean => err instanceof KubeApiError && err.status === 409;
export const isGone = (err: unknown): boolean => err instanceof KubeApiError && err.status === 410;
export const isAlreadyExists = (err: unknown): boolean =>
  err instanceof KubeApiError && err.status === 409 && err.reason === "AlreadyExists";

/** One event of a watch stream. */
/** An event of a watch of `T`s; an ERROR event carries the apiserver's Status instead. */
export type WatchEvent<T extends KubeObject = KubeObject> =
  | { type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"; object: T }
  | { type: "ERROR"; object: { code?: number; reason?: string; message?: string } };

/** The field manager of writes unless {@link KubeApiOptions.fieldManager} names another. */
const DEFAULT_FIELD_MANAGER = "cluster-proxy-addon-manager";

const REQUEST_TIMEOUT_MS = 30_000;

/**
 * Where a {@link KubeApi} sends its requests and how they authenticate, asked for every request: a
 * @kubernetes/client-node `KubeConfig` is one (it reads the certificate files it names each time).
 */
export interface KubeApiConfig {
  getCurrentCluster(): { server: string } | null;
  applyToHTTPSOptions(options: https.RequestOptions): Promise<void>;
}

export interface KubeApiOptions {
  /** The field manager of applies and writes. Default `cluster-proxy-addon-manager`. */
  fieldManager?: string;
  /** How long a request other than a watch may take. Default 30 s. */
  requestTimeoutMs?: number;
}

/** Which objects of a collection: those of `namespace` (all when absent) that the selectors select. */
export interface ListOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
}

function selectorQuery(options: ListOptions): URLSearchParams {
  const q = new URLSearchParams();
  if (options.labelSelector) q.set("labelSelector", options.labelSelector);
  if (options.fieldSelector) q.set("fieldSelector", options.fieldSelector);
  return q;
}

export interface ListResult<T extends KubeObject = KubeObject> {
  items: T[];
  resourceVersion: string;
}

/** A path-level client; one per manager. */
export class KubeApi {
  readonly server: URL;
  private readonly fieldManager: string;
  private readonly requestTimeoutMs: number;

  constructor(
    private readonly kc: KubeApiConfig,
    options: KubeApiOptions = {},
  ) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new KubeApiError(0, "NoCluster", "the kubeconfig has no current cluster");
    this.server = new URL(cluster.server);
    this.fieldManager = encodeURIComponent(options.fieldManager ?? DEFAULT_FIELD_MANAGER);
    this.requestTimeoutMs = options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  }

  /** The collection path of `ref` (in `namespace` when namespaced). */
  static collectionPath(ref: ResourceRef, namespace?: string): string {
    const base = ref.apiVersion.includes("/") ? `/apis/${ref.apiVersion}` : `/api/${ref.apiVersion}`;
    return ref.namespaced && namespace ? `${base}/namespaces/${namespace}/${ref.plural}` : `${base}/${ref.plural}`;
  }

  static objectPath(ref: ResourceRef, name: string, namespace?: string): string {
    return `${KubeApi.collectionPath(ref, namespace)}/${encodeURIComponent(name)}`;
  }

  async get<T extends KubeObject = KubeObject>(ref: ResourceRef, name: string, namespace?: string): Promise<T> {
    return (await this.request("GET", KubeApi.objectPath(ref, name, namespace))) as T;
  }

  /** `get`, or undefined when it does not exist. */
  async tryGet<T extends KubeObject = KubeObject>(
    ref: ResourceRef,
    name: string,
    namespace?: string,
  ): Promise<T | undefined> {
    try {
      return await this.get<T>(ref, name, namespace);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async list<T extends KubeObject>(ref: ResourceRef<T>, options: ListOptions = {}): Promise<ListResult<T>> {
    const q = selectorQuery(options);
    const body = (await this.request("GET", `${KubeApi.collectionPath(ref, options.namespace)}?${q.toString()}`)) as {
      items: T[];
      metadata: { resourceVersion: string };
    };
    for (const item of body.items) {
      item.apiVersion = ref.apiVersion;
      item.kind = ref.kind;
    }
    return { items: body.items, resourceVersion: body.metadata.resourceVersion };
  }

  /** Server-side apply of `obj` (fields we own are set to what it says; `force` takes them over). */
  async apply<T extends KubeObject = KubeObject>(ref: ResourceRef, obj: KubeObject): Promise<T> {
    const path = `${KubeApi.objectPath(ref, obj.metadata.name, obj.metadata.namespace)}?fieldManager=${this.fieldManager}&force=true`;
    return (await this.request(
      "PATCH",
      path,
      { ...obj, apiVersion: ref.apiVersion, kind: ref.kind },
      "application/apply-patch+yaml",
    )) as T;
  }

  async create<T extends KubeObject = KubeObject>(ref: ResourceRef, obj: KubeObject): Promise<T> {
    const path = `${KubeApi.collectionPath(ref, obj.metadata.namespace)}?fieldManager=${this.fieldManager}`;
    return (await this.request("POST", path, { ...obj, apiVersion: ref.apiVersion, kind: ref.kind })) as T;
  }

  /** PUT: fails with 409 when `obj.metadata.resourceVersion` is not the current one. */
  async replace<T extends KubeObject = KubeObject>(ref: ResourceRef, obj: KubeObject, subresource = ""): Promise<T> {
    const path = `${KubeApi.objectPath(ref, obj.metadata.name, obj.metadata.namespace)}${subresource ? `/${subresource}` : ""}?fieldManager=${this.fieldManager}`;
    return (await this.request("PUT", path, { ...obj, apiVersion: ref.apiVersion, kind: ref.kind })) as T;
  }

  /**
   * JSON merge patch (of `subresource` when given). Put `metadata.uid` and
   * `metadata.resourceVersion` in `patch` to make it conditional: a 409 then means someone
   * else wrote first, a 422 ("field is immutable") that the object was replaced (another uid);
   * merge patches replace whole lists, such as conditions.
   */
  async mergePatch<T extends KubeObject = KubeObject>(
    ref: ResourceRef,
    name: string,
    namespace: string | undefined,
    patch: Record<string, unknown>,
    subresource = "",
  ): Promise<T> {
    const path = `${KubeApi.objectPath(ref, name, namespace)}${subresource ? `/${subresource}` : ""}?fieldManager=${this.fieldManager}`;
    return (await this.request("PATCH", path, patch, "application/merge-patch+json")) as T;
  }

  /**
   * Delete; a missing object is not an error. With `preconditions` only that object (uid) as it was
   * read (resourceVersion) is deleted: a changed or replaced one is a 409 (KubeApiError).
   */
  async delete(
    ref: ResourceRef,
    name: string,
    namespace?: string,
    preconditions?: { uid?: string; resourceVersion?: string },
  ): Promise<void> {
    try {
      await this.request("DELETE", KubeApi.objectPath(ref, name, namespace), {
        propagationPolicy: "Background",
        ...(preconditions ? { preconditions } : {}),
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  /**
   * Watch a collection from `resourceVersion`. `onEvent` gets each event; the promise settles when
   * the stream ends (normally, by `signal`, or with an error). An ERROR event rejects with its status.
   */
  async watch<T extends KubeObject>(
    ref: ResourceRef<T>,
    options: ListOptions & { resourceVersion: string; timeoutSeconds?: number },
    onEvent: (event: WatchEvent<T>) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const q = selectorQuery(options);
    q.set("watch", "1");
    q.set("resourceVersion", options.resourceVersion);
    q.set("allowWatchBookmarks", "true");
    q.set("timeoutSeconds", String(options.timeoutSeconds ?? 300));
    const res = await this.open(
      "GET",
      `${KubeApi.collectionPath(ref, options.namespace)}?${q.toString()}`,
      undefined,
      undefined,
      signal,
      0,
    );
    if ((res.statusCode ?? 0) >= 300) throw await errorOf(res);
    await new Promise<void>((resolve, reject) => {
      let buffered = "";
      let failed = false;
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffered += chunk;
        for (let nl = buffered.indexOf("\n"); nl >= 0 && !failed; nl = buffered.indexOf("\n")) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (line === "") continue;
          // The one place a watched object gets its type: the apiserver sends the objects of `ref`.
          const event = JSON.parse(line) as WatchEvent<T>;
          if (event.type === "ERROR") {
            failed = true;
            const status = event.object;
            res.destroy();
            reject(new KubeApiError(status.code ?? 500, status.reason ?? "", status.message ?? "watch error"));
            return;
          }
          if (event.object && typeof event.object === "object") {
            event.object.apiVersion ??= ref.apiVersion;
            event.object.kind ??= ref.kind;
          }
          onEvent(event);
        }
      });
      res.on("end", () => resolve());
      res.on("close", () => resolve());
      res.on("error", (err) => (signal.aborted ? resolve() : reject(err)));
    });
  }

  /**
   * One JSON request; errors become {@link KubeApiError}. `signal` aborts it: its connection is
   * closed (while waiting for the answer or reading it) and the promise rejects.
   */
  async request(
    method: string,
    path: string,
    body?: unknown,
    contentType = "application/json",
    signal?: AbortSignal,
  ): Promise<unknown> {
    const res = await this.open(method, path, body, contentType, signal, this.requestTimeoutMs);
    let text: string;
    try {
      text = await readAll(res);
    } catch (err) {
      throw new KubeApiError(0, "Transport", `${method} ${path}: ${errorMessage(err)}`, { cause: err });
    }
    if ((res.statusCode ?? 0) >= 300) throw statusError(res.statusCode ?? 0, text, `${method} ${path}`);
    return text === "" ? undefined : JSON.parse(text);
  }

  private async open(
    method: string,
    path: string,
    body: unknown,
    contentType: string | undefined,
    signal: AbortSignal | undefined,
    timeoutMs: number,
  ): Promise<NodeHttp.IncomingMessage> {
    const opts: https.RequestOptions = {};
    await this.kc.applyToHTTPSOptions(opts);
    const url = new URL(this.server.pathname.replace(/\/$/, "") + path, this.server);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: NodeHttp.OutgoingHttpHeaders = {
      ...((opts.headers ?? {}) as NodeHttp.OutgoingHttpHeaders),
      accept: "application/json",
    };
    if (payload !== undefined) {
      headers["content-type"] = contentType ?? "application/json";
      headers["content-length"] = Buffer.byteLength(payload);
    }
    const transport = url.protocol === "http:" ? http : https;
    return new Promise((resolve, reject) => {
      const req = transport.request(url, { ...opts, method, headers, ...(signal ? { signal } : {}) }, resolve);
      if (timeoutMs > 0)
        req.setTimeout(timeoutMs, () =>
          req.destroy(new KubeApiError(0, "Timeout", `${method} ${path}: no answer within ${timeoutMs / 1000} s`)),
        );
      req.on("error", (err) =>
        reject(
          err instanceof KubeApiError
            ? err
            : new KubeApiError(0, "Transport", `${method} ${path}: ${err.message}`, { cause: err }),
        ),
      );
      req.end(payload);
    });
  }
}

async function readAll(res: NodeHttp.IncomingMessage): Promise<string> {
  res.setEncoding("utf8");
  let text = "";
  for await (const chunk of res) text += chunk as string;
  return text;
}

async function errorOf(res: NodeHttp.IncomingMessage): Promise<KubeApiError> {
  return statusError(res.statusCode ?? 0, await readAll(res), "watch");
}

function statusError(status: number, text: string, what: string): KubeApiError {
  let reason = "";
  let message = text.slice(0, 500);
  try {
    const s = JSON.parse(text) as { reason?: string; message?: string };
    reason = s.reason ?? "";
    message = s.message ?? message;
  } catch {
    // not a Status object: keep the text
  }
  return new KubeApiError(status, reason, `${what}: ${status} ${reason ? `${reason}: ` : ""}${message}`);
}
