/**
 * Test-only: a faithful fake kube-apiserver on loopback (REST, watches, TokenReview,
 * SubjectAccessReview, TokenRequest; `intercept` for a misbehaving one), checked against the real
 * one by test/kube/fake-fidelity.test.ts. Design: docs/testing/README.md#the-fake-api-server
 */
import { randomUUID } from "node:crypto";
import http from "node:http";
import https from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { KubeApi, KubeResources, type KubeApiConfig, type KubeObject, type ResourceRef } from "../kube-api.js";

/** A resource the fake serves, with the subresources it has (e.g. `status`, `approval`). */
export interface FakeResource extends ResourceRef {
  subresources?: readonly string[];
}

/** The body of a Kubernetes `Status` failure. */
export interface FakeStatus {
  code: number;
  reason: string;
  message: string;
}

/** One request the fake answered (or refused). */
export interface FakeRequest {
  method: string;
  /** Without the query. */
  path: string;
  query: URLSearchParams;
  contentType: string | undefined;
  /** The request's headers (e.g. `authorization`), as Node parsed them. */
  headers: http.IncomingHttpHeaders;
  body: unknown;
}

/** A user as the authenticator knows it (TokenReview's `status.user`). */
export interface FakeUser {
  username: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

/** A token the fake's authenticator knows: its user and, for a bound token, the audiences it is for. */
export interface FakeToken {
  user: FakeUser;
  /** The audiences the token was issued for; without, the apiserver's own (`apiAudiences`), as a static token's. */
  audiences?: string[];
}

/** The `spec` of a TokenReview, as sent. */
export interface FakeTokenReviewSpec {
  token?: string;
  audiences?: string[];
}

/** The `spec` of a SubjectAccessReview, as sent. */
export interface FakeAccessReviewSpec {
  user?: string;
  groups?: string[];
  uid?: string;
  extra?: Record<string, string[]>;
  resourceAttributes?: {
    namespace?: string;
    verb?: string;
    group?: string;
    version?: string;
    resource?: string;
    subresource?: string;
    name?: string;
  };
  nonResourceAttributes?: { path?: string; verb?: string };
}

/** A decision of the fake's authorizer (SubjectAccessReview's `status`). */
export interface FakeDecision {
  allowed: boolean;
  denied?: boolean;
  reason?: string;
}

/**
 * Takes over one request: answer it on `res` (now or later), leave it unanswered (a stall), or
 * destroy `res.socket`; `serve()` answers it as the fake would have.
 */
export type FakeInterceptor = (req: FakeRequest, res: http.ServerResponse, serve: () => void) => void;

type EventType = "ADDED" | "MODIFIED" | "DELETED";

interface StoredEvent {
  rv: number;
  key: string;
  type: EventType;
  object: KubeObject;
  /** The object before a MODIFIED (to tell a label selector's enter and leave). */
  old?: KubeObject;
}

interface Watcher {
  key: string;
  namespace: string | undefined;
  selector: (o: KubeObject) => boolean;
  res: http.ServerResponse;
  ref: ResourceRef;
  bookmarks: boolean;
  /** The resourceVersion the watch started from. */
  from: number;
  close: () => void;
}

interface Fault {
  remaining: number;
  status: FakeStatus;
  match: (req: FakeRequest) => boolean;
}

/** The subresources of the built-in resources the runtime knows. */
const BUILTIN_SUBRESOURCES: Record<string, readonly string[]> = {
  pods: ["status"],
  services: ["status"],
  deployments: ["status"],
  poddisruptionbudgets: ["status"],
  namespaces: ["status"],
  serviceaccounts: ["token"],
  certificatesigningrequests: ["status", "approval"],
};

/** The default resources: the runtime's {@link KubeResources}. */
export const DEFAULT_FAKE_RESOURCES: readonly FakeResource[] = Object.values(KubeResources).map((r) => ({
  ...r,
  ...(BUILTIN_SUBRESOURCES[r.plural] ? { subresources: BUILTIN_SUBRESOURCES[r.plural] } : {}),
}));

const BOOKMARK_EVERY_MS = 60_000;

const TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/** The apiserver's own audience (its `--service-account-issuer`, as in the env's apiservers). */
export const FAKE_API_AUDIENCE = "https://kubernetes.default.svc.cluster.local";
/** The letters of a generated name's suffix (the apiserver's: no vowels, no look-alikes). */
const NAME_SUFFIX_LETTERS = "bcdfghjklmnpqrstvwxz2456789";

const groupOf = (apiVersion: string): string => (apiVersion.includes("/") ? apiVersion.split("/")[0]! : "");
const resourceKey = (ref: ResourceRef): string => `${ref.apiVersion}/${ref.plural}`;
const objectKey = (namespace: string | undefined, name: string): string => `${namespace ?? ""}/${name}`;
const clone = <T>(v: T): T => structuredClone(v);

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return clone(patch);
  const out: Record<string, unknown> = isRecord(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** The API groups of Kubernetes' own types, which take strategic merge patches (custom resources do not). */
const BUILTIN_GROUPS = new Set([
  "",
  "apps",
  "policy",
  "certificates.k8s.io",
  "coordination.k8s.io",
  "discovery.k8s.io",
]);

/**
 * A strategic merge patch as the apiserver applies one to the built-in types, for what this runtime
 * sends: a merge patch, except that a `conditions` list is merged by each condition's `type` (its
 * patch merge key) instead of replaced, the patch's in its order first. Other lists are replaced; `$patch` directives are not modelled.
 */
export function strategicMergePatch(target: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return clone(patch);
  const out: Record<string, unknown> = isRecord(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    const old = out[k];
    if (v === null) delete out[k];
    else if (k === "conditions" && isList(v) && isList(old)) {
      // The patch's conditions (merged into the stored ones of their type) in its order, then the others.
      const typeOf = (c: unknown): unknown => (isRecord(c) ? c.type : undefined);
      const patched = v.map((c) => {
        const stored = old.find((o) => typeOf(o) === typeOf(c));
        return stored === undefined ? clone(c) : strategicMergePatch(stored, c);
      });
      out[k] = [...patched, ...old.filter((o) => !v.some((c) => typeOf(c) === typeOf(o)))];
    } else out[k] = strategicMergePatch(old, v);
  }
  return out;
}

const isList = (v: unknown): v is unknown[] => Array.isArray(v);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `raw` with a name made from its `metadata.generateName` when it has none, as the apiserver makes it. */
function withGeneratedName(raw: unknown): unknown {
  if (!isRecord(raw) || !isRecord(raw.metadata)) return raw;
  const { name, generateName } = raw.metadata;
  if ((typeof name === "string" && name !== "") || typeof generateName !== "string" || generateName === "") return raw;
  const suffix = Array.from(
    { length: 5 },
    () => NAME_SUFFIX_LETTERS[Math.floor(Math.random() * NAME_SUFFIX_LETTERS.length)],
  ).join("");
  return { ...raw, metadata: { ...raw.metadata, name: `${generateName}${suffix}` } };
}

function isKubeObject(v: unknown): v is KubeObject {
  return isRecord(v) && isRecord(v.metadata);
}

/** A label selector of the equality and set-based forms kubectl accepts (`a=b,c!=d,e,!f,g in (h,i)`). */
export function labelSelector(text: string): (o: KubeObject) => boolean {
  const terms: ((labels: Record<string, string>) => boolean)[] = [];
  for (const raw of text.match(/(?:[^,(]|\([^)]*\))+/g) ?? []) {
    const term = raw.trim();
    if (term === "") continue;
    const set = /^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
    const eq = /^([^!=]+?)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (set) {
      const [, key, op, values] = set;
      const vs = values!.split(",").map((v) => v.trim());
      terms.push((l) => (op === "in" ? vs.includes(l[key!] ?? "\0") : !vs.includes(l[key!] ?? "\0")));
    } else if (eq) {
      const [, key, op, value] = eq;
      terms.push((l) => (op === "!=" ? l[key!.trim()] !== value!.trim() : l[key!.trim()] === value!.trim()));
    } else if (term.startsWith("!")) terms.push((l) => !(term.slice(1) in l));
    else terms.push((l) => term in l);
  }
  return (o) => terms.every((t) => t(o.metadata.labels ?? {}));
}

/** `metadata.name=x` and `metadata.namespace=y` field selectors (all the apiserver allows everywhere). */
function fieldSelector(text: string): (o: KubeObject) => boolean {
  const terms = text
    .split(",")
    .filter((t) => t.trim() !== "")
    .map((t) => {
      const m = /^([^!=]+?)\s*(==|=|!=)\s*(.*)$/.exec(t.trim());
      if (!m) throw statusOf(400, "BadRequest", `invalid field selector: ${t}`);
      const [, field, op, value] = m;
      const get = (o: KubeObject): string | undefined =>
        field === "metadata.name" ? o.metadata.name : field === "metadata.namespace" ? o.metadata.namespace : undefined;
      if (field !== "metadata.name" && field !== "metadata.namespace")
        throw statusOf(400, "BadRequest", `field label not supported: ${field}`);
      return (o: KubeObject) => (op === "!=" ? get(o) !== value : get(o) === value);
    });
  return (o) => terms.every((t) => t(o));
}

class StatusError extends Error {
  constructor(readonly status: FakeStatus & { details?: Record<string, unknown> }) {
    super(status.message);
  }
}

/** A path outside every served group and version: the apiserver's mux answers in plain text. */
class NoRoute extends Error {}

function statusOf(code: number, reason: string, message: string, details?: Record<string, unknown>): StatusError {
  return new StatusError({ code, reason, message, ...(details ? { details } : {}) });
}

function statusBody(s: FakeStatus & { details?: Record<string, unknown> }): Record<string, unknown> {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: s.message,
    reason: s.reason,
    ...(s.details ? { details: s.details } : {}),
    code: s.code,
  };
}

/** What a path names. */
interface Target {
  resource: FakeResource;
  namespace: string | undefined;
  name: string | undefined;
  subresource: string | undefined;
}

/**
 * The fake apiserver. `start()` it, hand `api()` (a real {@link KubeApi}) to the code under test, and
 * seed or inspect objects with `put`, `object` and `objects` (these write like the apiserver does:
 * a new resourceVersion and a watch event per change).
 */
export class FakeApiServer {
  private readonly resources = new Map<string, FakeResource>();
  private readonly store = new Map<string, Map<string, KubeObject>>();
  private readonly history: StoredEvent[] = [];
  private readonly watchers = new Set<Watcher>();
  private readonly faults: Fault[] = [];
  private rv = 1;
  /** The resourceVersion of each resource's last change (what its watch cache has seen). */
  private readonly lastRv = new Map<string, number>();
  /** Watches from a resourceVersion below this are expired (410). */
  private oldest = 1;
  private server: http.Server | undefined;
  /** Every change stored (by a request or by `put`/`remove`), in order. */
  readonly changes: { type: EventType; object: KubeObject }[] = [];
  /** Every request, in order. */
  readonly requests: FakeRequest[] = [];
  /** Called with each request before it is answered (to observe the client at that moment). */
  onRequest: ((req: FakeRequest) => void) | undefined;
  /** When set, gets every request (after `onRequest`) instead of the fake: see {@link FakeInterceptor}. */
  intercept: FakeInterceptor | undefined;
  /**
   * Answers an upgrade (a pod's `proxy`, `exec`, `portforward`), which the fake does not model; without
   * it an upgrade's connection is closed.
   */
  upgrade: ((req: http.IncomingMessage, socket: Socket, head: Buffer) => void) | undefined;
  /** The tokens TokenReviews authenticate (TokenRequests add theirs). */
  readonly tokens = new Map<string, FakeToken>();
  /** The authenticator of TokenReviews: by default the token table. */
  authenticate: (token: string) => FakeToken | undefined = (token) => this.tokens.get(token);
  /** The audiences of a TokenReview or TokenRequest that names none: the apiserver's own. */
  apiAudiences: string[] = [FAKE_API_AUDIENCE];
  /**
   * The authorizer of SubjectAccessReviews: by default only the group `system:masters` (as the
   * apiserver's privileged-group authorizer) is allowed anything.
   */
  authorize: (spec: FakeAccessReviewSpec) => boolean | FakeDecision = (spec) =>
    (spec.groups ?? []).includes("system:masters");
  /** Every TokenReview's spec, in order. */
  readonly tokenReviews: FakeTokenReviewSpec[] = [];
  /** Every token a TokenRequest issued, in order. */
  readonly issuedTokens: { serviceAccount: string; token: string; expirationTimestamp: string }[] = [];
  /** Every SubjectAccessReview's spec, in order. */
  readonly accessReviews: FakeAccessReviewSpec[] = [];
  /** The most connections open at once since `resetPeakConnections()`. */
  peakConnections = 0;
  private readonly sockets = new Set<Socket>();
  private readonly socketWaits = new Set<() => void>();
  url = "";

  constructor(resources: readonly FakeResource[] = []) {
    for (const r of [...DEFAULT_FAKE_RESOURCES, ...resources]) {
      // A resource named again keeps the subresources it had unless it names its own.
      const known = this.resources.get(resourceKey(r))?.subresources;
      this.resources.set(resourceKey(r), { ...r, ...(r.subresources || !known ? {} : { subresources: known }) });
    }
  }

  /** A started fake serving the runtime's resources and `resources`. */
  static async start(
    resources: readonly FakeResource[] = [],
    options: { tls?: https.ServerOptions } = {},
  ): Promise<FakeApiServer> {
    const fake = new FakeApiServer(resources);
    await fake.listen(options.tls);
    return fake;
  }

  /** Listen on loopback: plain HTTP, or HTTPS with `tls` (a serving certificate, and a client CA to ask for one). */
  private async listen(tls: https.ServerOptions | undefined): Promise<void> {
    const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => void this.handle(req, res);
    const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
    this.server = server;
    server.on("upgrade", (req: http.IncomingMessage, socket: Socket, head: Buffer) => {
      if (this.upgrade) this.upgrade(req, socket, head);
      else socket.destroy();
    });
    server.on(tls ? "secureConnection" : "connection", (socket: Socket) => {
      this.sockets.add(socket);
      this.peakConnections = Math.max(this.peakConnections, this.sockets.size);
      socket.on("close", () => {
        this.sockets.delete(socket);
        for (const wake of [...this.socketWaits]) wake();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    this.url = `${tls ? "https" : "http"}://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  /** A client configuration for this server (plain HTTP on loopback, no credentials). */
  kubeConfig(): KubeApiConfig {
    const server = this.url;
    return { getCurrentCluster: () => ({ server }), applyToHTTPSOptions: () => Promise.resolve() };
  }

  /** A real client of this server. */
  api(): KubeApi {
    return new KubeApi(this.kubeConfig());
  }

  /** The current resourceVersion. */
  resourceVersion(): string {
    return String(this.rv);
  }

  /** Create or overwrite `obj` as stored (a new resourceVersion, uid kept or made, a watch event). */
  put<T extends Pick<KubeObject, "metadata">>(ref: ResourceRef, obj: T): T {
    const { namespace, name } = obj.metadata;
    const old = this.bucket(ref).get(objectKey(ref.namespaced ? namespace : undefined, name));
    const fields: object = clone(obj);
    const next: KubeObject = {
      ...fields,
      apiVersion: ref.apiVersion,
      kind: ref.kind,
      metadata: {
        ...clone(obj.metadata),
        uid: obj.metadata.uid ?? old?.metadata.uid ?? randomUUID(),
        creationTimestamp: obj.metadata.creationTimestamp ?? old?.metadata.creationTimestamp ?? now(),
      },
    };
    return clone(this.write(ref, old ? "MODIFIED" : "ADDED", next, old)) as T;
  }

  /** The stored object, or undefined. */
  object<T extends Pick<KubeObject, "metadata"> = KubeObject>(
    ref: ResourceRef,
    name: string,
    namespace?: string,
  ): T | undefined {
    const o = this.bucket(ref).get(objectKey(ref.namespaced ? namespace : undefined, name));
    return o ? (clone(o) as T) : undefined;
  }

  /** The stored objects of `ref` (in `namespace` when given). */
  objects<T extends KubeObject = KubeObject>(ref: ResourceRef<T>, namespace?: string): T[] {
    return [...this.bucket(ref).values()]
      .filter((o) => namespace === undefined || o.metadata.namespace === namespace)
      .map((o) => clone(o) as T);
  }

  /** Remove an object as a DELETE would (a watch event); false when there was none. */
  remove(ref: ResourceRef, name: string, namespace?: string): boolean {
    const key = objectKey(ref.namespaced ? namespace : undefined, name);
    const old = this.bucket(ref).get(key);
    if (!old) return false;
    this.write(ref, "DELETED", old, old);
    return true;
  }

  /**
   * Forget the history so far, as etcd's compaction and the watch cache's window do: a watch from a
   * resourceVersion before now is answered with 410 Gone (Expired). Open watches go on.
   */
  expire(): void {
    this.rv++;
    this.oldest = this.rv;
    this.history.length = 0;
  }

  /** End every open watch cleanly, as the apiserver does at a watch's timeout or on restart. */
  closeWatches(): void {
    for (const w of [...this.watchers]) w.close();
  }

  /** Cut every open watch's connection, as a network failure or a crashed apiserver does: the client's stream fails. */
  dropWatches(): void {
    for (const w of [...this.watchers]) {
      w.res.socket?.destroy();
      w.close();
    }
  }

  /** Send a BOOKMARK (the resource's last change) to every watch that asked for them and is behind it. */
  bookmark(): void {
    for (const w of this.watchers) this.sendBookmark(w);
  }

  /** Answer the next `count` requests matching `match` (all by default) with `status`. */
  failNext(
    count: number,
    status: FakeStatus = { code: 500, reason: "InternalError", message: "injected fault" },
    match: (req: FakeRequest) => boolean = () => true,
  ): void {
    this.faults.push({ remaining: count, status, match });
  }

  /** The number of open watches. */
  openWatches(): number {
    return this.watchers.size;
  }

  /** The number of client connections open now. */
  openConnections(): number {
    return this.sockets.size;
  }

  /** Start counting `peakConnections` from the connections open now. */
  resetPeakConnections(): void {
    this.peakConnections = this.sockets.size;
  }

  /** Resolves once at most `n` connections are open; rejects, naming how many are, after `ms`. */
  async connectionsAtMost(n: number, ms: number): Promise<void> {
    if (this.sockets.size <= n) return;
    await new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        if (this.sockets.size > n) return;
        done();
        resolve();
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${this.sockets.size} connections still open after ${ms} ms (at most ${n})`));
      }, ms);
      const done = (): void => {
        clearTimeout(timer);
        this.socketWaits.delete(wake);
      };
      this.socketWaits.add(wake);
    });
  }

  async close(): Promise<void> {
    for (const w of [...this.watchers]) w.close();
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private bucket(ref: ResourceRef): Map<string, KubeObject> {
    const key = resourceKey(ref);
    let b = this.store.get(key);
    if (!b) this.store.set(key, (b = new Map<string, KubeObject>()));
    return b;
  }

  /** Store `obj` (or drop it for DELETED) at the next resourceVersion and tell the watches. */
  private write(ref: ResourceRef, type: EventType, obj: KubeObject, old?: KubeObject): KubeObject {
    const rv = ++this.rv;
    const stored: KubeObject = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(rv) } };
    const key = objectKey(ref.namespaced ? obj.metadata.namespace : undefined, obj.metadata.name);
    if (type === "DELETED") this.bucket(ref).delete(key);
    else this.bucket(ref).set(key, stored);
    this.lastRv.set(resourceKey(ref), rv);
    this.changes.push({ type, object: clone(stored) });
    const event: StoredEvent = { rv, key: resourceKey(ref), type, object: clone(stored), ...(old ? { old } : {}) };
    this.history.push(event);
    for (const w of this.watchers) this.deliver(w, event);
    return stored;
  }

  private deliver(w: Watcher, e: StoredEvent): void {
    if (w.key !== e.key) return;
    if (w.namespace !== undefined && e.object.metadata.namespace !== w.namespace) return;
    const now = w.selector(e.object);
    const before = e.old !== undefined && w.selector(e.old);
    let type: EventType | undefined;
    if (e.type === "MODIFIED") type = now && before ? "MODIFIED" : now ? "ADDED" : before ? "DELETED" : undefined;
    else if (now) type = e.type;
    if (type) this.send(w, { type, object: e.object });
  }

  private send(w: Watcher, event: { type: string; object: unknown }): void {
    if (!w.res.writableEnded) w.res.write(`${JSON.stringify(event)}\n`);
  }

  /** A BOOKMARK at the resource's last change, as the watch cache sends them (only news: past the watch's start). */
  private sendBookmark(w: Watcher, initialEventsEnd?: number): void {
    if (!w.bookmarks) return;
    const rv = initialEventsEnd ?? this.lastRv.get(w.key) ?? 0;
    if (initialEventsEnd === undefined && rv <= w.from) return;
    this.send(w, {
      type: "BOOKMARK",
      object: {
        kind: w.ref.kind,
        apiVersion: w.ref.apiVersion,
        metadata: {
          resourceVersion: String(rv),
          ...(initialEventsEnd !== undefined ? { annotations: { "k8s.io/initial-events-end": "true" } } : {}),
        },
      },
    });
  }

  private parse(path: string): Target {
    const parts = path
      .split("/")
      .filter((p) => p !== "")
      .map(decodeURIComponent);
    let apiVersion: string;
    let rest: string[];
    if (parts[0] === "api" && parts.length >= 3) [apiVersion, rest] = [parts[1]!, parts.slice(2)];
    else if (parts[0] === "apis" && parts.length >= 4) [apiVersion, rest] = [`${parts[1]}/${parts[2]}`, parts.slice(3)];
    else throw new NoRoute();
    if (![...this.resources.values()].some((r) => r.apiVersion === apiVersion)) throw new NoRoute();
    let namespace: string | undefined;
    if (rest[0] === "namespaces" && rest.length >= 3 && this.resources.has(`${apiVersion}/${rest[2]}`)) {
      namespace = rest[1];
      rest = rest.slice(2);
    }
    const resource = this.resources.get(`${apiVersion}/${rest[0]}`);
    if (!resource || rest.length > 3 || (namespace !== undefined && !resource.namespaced))
      throw statusOf(404, "NotFound", "the server could not find the requested resource");
    const subresource = rest[2];
    if (subresource !== undefined && !(resource.subresources ?? []).includes(subresource))
      throw statusOf(404, "NotFound", "the server could not find the requested resource");
    return { resource, namespace, name: rest[1], subresource };
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://fake");
    let text = "";
    req.setEncoding("utf8");
    for await (const chunk of req) text += chunk as string;
    let body: unknown;
    try {
      body = text === "" ? undefined : JSON.parse(text);
    } catch {
      body = text;
    }
    const request: FakeRequest = {
      method: req.method ?? "GET",
      path: url.pathname,
      query: url.searchParams,
      contentType: req.headers["content-type"],
      headers: req.headers,
      body,
    };
    this.requests.push(request);
    this.onRequest?.(request);
    if (this.intercept) this.intercept(request, res, () => this.serve(request, res));
    else this.serve(request, res);
  }

  private serve(request: FakeRequest, res: http.ServerResponse): void {
    if (res.writableEnded || res.destroyed) return;
    const url = { pathname: request.path, searchParams: request.query };
    const body = request.body;
    const reply = (code: number, value: unknown): void => {
      res.writeHead(code, { "content-type": "application/json" });
      res.end(JSON.stringify(value));
    };
    try {
      const fault = this.faults.find((f) => f.remaining > 0 && f.match(request));
      if (fault) {
        fault.remaining--;
        throw new StatusError(fault.status);
      }
      if (request.method === "POST" && url.pathname === TOKEN_REVIEWS) return reply(201, this.tokenReview(body));
      if (request.method === "POST" && url.pathname === ACCESS_REVIEWS) return reply(201, this.accessReview(body));
      const target = this.parse(url.pathname);
      const q = url.searchParams;
      switch (request.method) {
        case "GET":
          if (target.name !== undefined) return reply(200, this.get(target));
          if (q.get("watch") === "1" || q.get("watch") === "true") return this.watch(target, q, res);
          return reply(200, this.list(target, q));
        case "POST":
          if (target.subresource === "token" && target.name !== undefined)
            return reply(201, this.tokenRequest(target, body));
          return reply(201, this.create(target, body));
        case "PUT":
          return reply(200, this.update(target, body));
        case "PATCH":
          return reply(200, this.patch(target, body, request.contentType ?? ""));
        case "DELETE":
          return reply(200, this.delete(target, body));
        default:
          throw statusOf(405, "MethodNotAllowed", `${request.method} is not supported`);
      }
    } catch (err) {
      if (err instanceof StatusError) return reply(err.status.code, statusBody(err.status));
      if (err instanceof NoRoute) {
        res.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
        return void res.end("404 page not found\n");
      }
      reply(500, statusBody({ code: 500, reason: "InternalError", message: String(err) }));
    }
  }

  /** A TokenReview: the token's user when the table knows it for the audiences asked (or the apiserver's). */
  private tokenReview(raw: unknown): Record<string, unknown> {
    const spec: FakeTokenReviewSpec = isRecord(raw) && isRecord(raw.spec) ? clone(raw.spec) : {};
    this.tokenReviews.push(spec);
    const asked = spec.audiences && spec.audiences.length > 0 ? spec.audiences : this.apiAudiences;
    const known = typeof spec.token === "string" ? this.authenticate(spec.token) : undefined;
    const valid = known?.audiences ?? this.apiAudiences;
    const audiences = known ? asked.filter((a) => valid.includes(a)) : [];
    let status: Record<string, unknown> = { error: "invalid bearer token", user: {} };
    if (known && audiences.length === 0 && known.audiences)
      status = {
        error: `[invalid bearer token, token audiences ${JSON.stringify(valid)} is invalid for the target audiences ${JSON.stringify(asked)}]`,
        user: {},
      };
    else if (known && audiences.length > 0) {
      const { username, uid, groups = [], extra } = known.user;
      const authenticated = groups.includes("system:authenticated") ? groups : [...groups, "system:authenticated"];
      status = {
        authenticated: true,
        user: { username, ...(uid ? { uid } : {}), groups: authenticated, ...(extra ? { extra: clone(extra) } : {}) },
        audiences,
      };
    }
    return {
      kind: "TokenReview",
      apiVersion: "authentication.k8s.io/v1",
      metadata: {},
      spec: raw !== undefined && isRecord(raw) && isRecord(raw.spec) ? raw.spec : {},
      status,
    };
  }

  /** A SubjectAccessReview: the spec as validation requires it, decided by `authorize`. */
  private accessReview(raw: unknown): Record<string, unknown> {
    const spec: FakeAccessReviewSpec = isRecord(raw) && isRecord(raw.spec) ? clone(raw.spec) : {};
    if (!spec.resourceAttributes && !spec.nonResourceAttributes)
      throw statusOf(
        422,
        "Invalid",
        `.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified`,
        { kind: "SubjectAccessReview", group: "authorization.k8s.io" },
      );
    if (!spec.user && (spec.groups ?? []).length === 0)
      throw statusOf(
        422,
        "Invalid",
        `.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or group must be specified`,
        { kind: "SubjectAccessReview", group: "authorization.k8s.io" },
      );
    this.accessReviews.push(spec);
    const verdict = this.authorize(clone(spec));
    const decision: FakeDecision = typeof verdict === "boolean" ? { allowed: verdict } : verdict;
    return {
      kind: "SubjectAccessReview",
      apiVersion: "authorization.k8s.io/v1",
      metadata: {},
      spec: isRecord(raw) && isRecord(raw.spec) ? raw.spec : {},
      status: {
        allowed: decision.allowed,
        ...(decision.denied ? { denied: true } : {}),
        ...(decision.reason ? { reason: decision.reason } : {}),
      },
    };
  }

  /** A TokenRequest of a ServiceAccount that exists: a new token, which TokenReviews then know. */
  private tokenRequest(t: Target, raw: unknown): Record<string, unknown> {
    const name = t.name!;
    const account = this.current(t, name);
    const spec = isRecord(raw) && isRecord(raw.spec) ? raw.spec : {};
    const expirationSeconds = typeof spec.expirationSeconds === "number" ? spec.expirationSeconds : 3600;
    const audiences =
      Array.isArray(spec.audiences) && spec.audiences.length > 0 ? spec.audiences.map(String) : [...this.apiAudiences];
    const token = `fake-token-${randomUUID()}`;
    const namespace = t.namespace ?? "";
    this.tokens.set(token, {
      user: {
        username: `system:serviceaccount:${namespace}:${name}`,
        ...(account.metadata.uid ? { uid: account.metadata.uid } : {}),
        groups: ["system:serviceaccounts", `system:serviceaccounts:${namespace}`],
      },
      audiences,
    });
    const expires = new Date(Date.now() + expirationSeconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");
    this.issuedTokens.push({ serviceAccount: `${namespace}/${name}`, token, expirationTimestamp: expires });
    return {
      kind: "TokenRequest",
      apiVersion: "authentication.k8s.io/v1",
      metadata: {
        name,
        namespace,
        ...(account.metadata.uid ? { uid: account.metadata.uid } : {}),
        creationTimestamp: now(),
      },
      spec: { audiences, expirationSeconds, boundObjectRef: null },
      status: { token, expirationTimestamp: expires },
    };
  }

  private notFound(t: Target, name: string): StatusError {
    const group = groupOf(t.resource.apiVersion);
    const what = group ? `${t.resource.plural}.${group}` : t.resource.plural;
    return statusOf(404, "NotFound", `${what} "${name}" not found`, {
      name,
      ...(group ? { group } : {}),
      kind: t.resource.plural,
    });
  }

  private conflict(t: Target, name: string, message: string): StatusError {
    const group = groupOf(t.resource.apiVersion);
    const what = group ? `${t.resource.plural}.${group}` : t.resource.plural;
    return statusOf(409, "Conflict", `Operation cannot be fulfilled on ${what} "${name}": ${message}`, {
      name,
      ...(group ? { group } : {}),
      kind: t.resource.plural,
    });
  }

  private current(t: Target, name: string): KubeObject {
    const o = this.bucket(t.resource).get(objectKey(t.namespace, name));
    if (!o) throw this.notFound(t, name);
    return o;
  }

  private get(t: Target): KubeObject {
    return this.current(t, t.name!);
  }

  private list(t: Target, q: URLSearchParams): Record<string, unknown> {
    const labels = labelSelector(q.get("labelSelector") ?? "");
    const fields = fieldSelector(q.get("fieldSelector") ?? "");
    const items = [...this.bucket(t.resource).values()]
      .filter((o) => t.namespace === undefined || o.metadata.namespace === t.namespace)
      .filter((o) => labels(o) && fields(o))
      .sort((a, b) =>
        objectKey(a.metadata.namespace, a.metadata.name).localeCompare(
          objectKey(b.metadata.namespace, b.metadata.name),
        ),
      )
      .map(({ apiVersion: _a, kind: _k, ...rest }) => rest);
    return {
      kind: `${t.resource.kind}List`,
      apiVersion: t.resource.apiVersion,
      metadata: { resourceVersion: String(this.rv) },
      items,
    };
  }

  private body(t: Target, body: unknown): KubeObject {
    if (!isKubeObject(body) || typeof body.metadata.name !== "string" || body.metadata.name === "")
      throw statusOf(400, "BadRequest", "the object has no metadata.name");
    if (t.namespace !== undefined && body.metadata.namespace !== undefined && body.metadata.namespace !== t.namespace)
      throw statusOf(
        400,
        "BadRequest",
        "the namespace of the provided object does not match the namespace sent on the request",
      );
    return {
      ...body,
      metadata: { ...body.metadata, ...(t.namespace !== undefined ? { namespace: t.namespace } : {}) },
    };
  }

  private create(t: Target, raw: unknown): KubeObject {
    if (t.name !== undefined)
      throw statusOf(405, "MethodNotAllowed", "the server does not allow this method on the requested resource");
    const obj = this.body(t, withGeneratedName(raw));
    if (t.resource.namespaced && obj.metadata.namespace === undefined)
      throw statusOf(404, "NotFound", "the server could not find the requested resource");
    const key = objectKey(t.namespace, obj.metadata.name);
    if (this.bucket(t.resource).has(key)) {
      const group = groupOf(t.resource.apiVersion);
      const what = group ? `${t.resource.plural}.${group}` : t.resource.plural;
      throw statusOf(409, "AlreadyExists", `${what} "${obj.metadata.name}" already exists`, {
        name: obj.metadata.name,
        ...(group ? { group } : {}),
        kind: t.resource.plural,
      });
    }
    const { resourceVersion: _rv, ...metadata } = obj.metadata;
    const created: KubeObject = {
      ...obj,
      apiVersion: t.resource.apiVersion,
      kind: t.resource.kind,
      metadata: {
        ...metadata,
        uid: randomUUID(),
        creationTimestamp: now(),
        ...("spec" in obj ? { generation: 1 } : {}),
      },
    };
    return this.write(t.resource, "ADDED", created);
  }

  /** `next` as the resource (or its subresource) lets it be written over `old`. */
  private merged(t: Target, old: KubeObject, next: KubeObject): KubeObject {
    const hasStatus = (t.resource.subresources ?? []).includes("status");
    let out: KubeObject;
    if (t.subresource === "status") out = { ...old, status: next.status };
    else if (t.subresource === "approval") {
      const status = isRecord(old.status) ? old.status : {};
      out = { ...old, status: { ...status, conditions: isRecord(next.status) ? next.status.conditions : undefined } };
    } else {
      out = {
        ...next,
        metadata: { ...next.metadata, uid: old.metadata.uid, creationTimestamp: old.metadata.creationTimestamp },
      };
      if (hasStatus) {
        if (old.status === undefined) delete out.status;
        else out.status = old.status;
      }
      const { metadata: _m, status: _s, ...spec } = out;
      const { metadata: _om, status: _os, ...oldSpec } = old;
      const generation = old.metadata.generation;
      if (generation !== undefined)
        out.metadata.generation = JSON.stringify(spec) === JSON.stringify(oldSpec) ? generation : generation + 1;
    }
    if (t.subresource !== undefined) out = { ...out, metadata: old.metadata };
    return { ...out, apiVersion: t.resource.apiVersion, kind: t.resource.kind };
  }

  private update(t: Target, raw: unknown): KubeObject {
    if (t.name === undefined)
      throw statusOf(405, "MethodNotAllowed", "the server does not allow this method on the requested resource");
    const obj = this.body(t, raw);
    if (obj.metadata.name !== t.name)
      throw statusOf(400, "BadRequest", "the name of the object does not match the name on the URL");
    const old = this.current(t, t.name);
    this.preconditions(t, old, obj.metadata.uid, obj.metadata.resourceVersion, false);
    return this.write(t.resource, "MODIFIED", this.merged(t, old, obj), old);
  }

  /** A PUT's or merge patch's conditions: the resourceVersion (409), then the uid (as the apiserver words each). */
  private preconditions(t: Target, old: KubeObject, uid: unknown, resourceVersion: unknown, patch: boolean): void {
    const name = old.metadata.name;
    if (
      typeof resourceVersion === "string" &&
      resourceVersion !== "" &&
      resourceVersion !== old.metadata.resourceVersion
    )
      throw this.conflict(
        t,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
      );
    if (typeof uid !== "string" || uid === "" || uid === old.metadata.uid) return;
    // A merge patch writes the uid, which validation refuses; a PUT's uid is a storage precondition.
    if (patch)
      throw statusOf(
        422,
        "Invalid",
        `${t.resource.kind} "${name}" is invalid: metadata.uid: Invalid value: "${uid}": field is immutable`,
        {
          name,
          ...(groupOf(t.resource.apiVersion) ? { group: groupOf(t.resource.apiVersion) } : {}),
          kind: t.resource.kind,
        },
      );
    const group = groupOf(t.resource.apiVersion);
    const key = `/registry/${group ? `${group}/` : ""}${t.resource.plural}/${t.namespace ? `${t.namespace}/` : ""}${name}`;
    throw this.conflict(
      t,
      name,
      `StorageError: invalid object, Code: 4, Key: ${key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: ${uid}, UID in object meta: ${old.metadata.uid}`,
    );
  }

  private patch(t: Target, raw: unknown, contentType: string): KubeObject {
    if (t.name === undefined)
      throw statusOf(405, "MethodNotAllowed", "the server does not allow this method on the requested resource");
    if (!isRecord(raw)) throw statusOf(400, "BadRequest", "the patch is not an object");
    const type = contentType.split(";")[0]!.trim();
    const old = this.bucket(t.resource).get(objectKey(t.namespace, t.name));
    if (type === "application/apply-patch+yaml") {
      // Server-side apply without field ownership: create, or merge like a merge patch.
      if (!old)
        return this.create(
          { ...t, name: undefined },
          { ...raw, metadata: { ...(isRecord(raw.metadata) ? raw.metadata : {}), name: t.name } },
        );
      const next = mergePatch(old, raw);
      return this.write(t.resource, "MODIFIED", this.merged(t, old, next as KubeObject), old);
    }
    const strategic = type === "application/strategic-merge-patch+json";
    if (strategic && !BUILTIN_GROUPS.has(groupOf(t.resource.apiVersion)))
      throw statusOf(
        415,
        "UnsupportedMediaType",
        `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml`,
      );
    if (type !== "application/merge-patch+json" && !strategic)
      throw statusOf(
        415,
        "UnsupportedMediaType",
        `the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/apply-patch+yaml`,
      );
    if (!old) throw this.notFound(t, t.name);
    const meta = isRecord(raw.metadata) ? raw.metadata : {};
    this.preconditions(t, old, meta.uid, meta.resourceVersion, true);
    const next = (strategic ? strategicMergePatch(old, raw) : mergePatch(old, raw)) as KubeObject;
    return this.write(t.resource, "MODIFIED", this.merged(t, old, next), old);
  }

  private delete(t: Target, raw: unknown): Record<string, unknown> {
    if (t.name === undefined)
      throw statusOf(405, "MethodNotAllowed", "the server does not allow this method on the requested resource");
    const old = this.current(t, t.name);
    const pre = isRecord(raw) && isRecord(raw.preconditions) ? raw.preconditions : {};
    const refuse = (message: string): StatusError =>
      statusOf(409, "Conflict", `Operation cannot be fulfilled on ${t.resource.kind} "${t.name}": ${message}`, {
        name: t.name,
        ...(groupOf(t.resource.apiVersion) ? { group: groupOf(t.resource.apiVersion) } : {}),
        kind: t.resource.kind,
      });
    if (typeof pre.uid === "string" && pre.uid !== old.metadata.uid)
      throw refuse(
        `the UID in the precondition (${pre.uid}) does not match the UID in record (${old.metadata.uid}). The object might have been deleted and then recreated`,
      );
    if (typeof pre.resourceVersion === "string" && pre.resourceVersion !== old.metadata.resourceVersion)
      throw refuse(
        `the ResourceVersion in the precondition (${pre.resourceVersion}) does not match the ResourceVersion in record (${old.metadata.resourceVersion}). The object might have been modified`,
      );
    this.write(t.resource, "DELETED", old, old);
    const group = groupOf(t.resource.apiVersion);
    return {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Success",
      details: { name: t.name, ...(group ? { group } : {}), kind: t.resource.plural, uid: old.metadata.uid },
    };
  }

  private watch(t: Target, q: URLSearchParams, res: http.ServerResponse): void {
    const from = q.get("resourceVersion") ?? "";
    const fields = fieldSelector(q.get("fieldSelector") ?? "");
    const labels = labelSelector(q.get("labelSelector") ?? "");
    res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" });
    const timeoutMs = Number(q.get("timeoutSeconds") ?? "1800") * 1000;
    const timers: NodeJS.Timeout[] = [];
    const w: Watcher = {
      key: resourceKey(t.resource),
      namespace: t.namespace,
      selector: (o) => labels(o) && fields(o),
      res,
      ref: t.resource,
      bookmarks: q.get("allowWatchBookmarks") === "true",
      from: Number(from),
      close: () => {
        for (const timer of timers) clearTimeout(timer);
        this.watchers.delete(w);
        if (!res.writableEnded) res.end();
      },
    };
    res.on("close", () => w.close());
    if (from !== "" && from !== "0" && Number(from) < this.oldest) {
      this.send(w, {
        type: "ERROR",
        object: statusBody({
          code: 410,
          reason: "Expired",
          message: `too old resource version: ${from} (${this.oldest})`,
        }),
      });
      res.end();
      return;
    }
    if (from === "" || from === "0") {
      // The current objects as ADDED, then (with bookmarks) one marking their end: at the
      // resource's last change from the cache ("0"), at the latest one for a consistent read ("").
      for (const o of this.list(t, q).items as KubeObject[])
        this.send(w, { type: "ADDED", object: { ...o, apiVersion: t.resource.apiVersion, kind: t.resource.kind } });
      w.from = from === "" ? this.rv : (this.lastRv.get(w.key) ?? 0);
      this.sendBookmark(w, w.from);
    } else {
      for (const e of this.history) if (e.rv > Number(from)) this.deliver(w, e);
    }
    this.watchers.add(w);
    const deadline = Date.now() + timeoutMs;
    const later = (ms: number, fn: () => void): void => {
      const timer = setTimeout(fn, ms);
      timer.unref();
      timers.push(timer);
    };
    later(timeoutMs, () => w.close());
    // As the apiserver's watch cache: a bookmark a minute, and one 2 s before the timeout.
    const bookmarkAt = (at: number): void =>
      later(at - Date.now(), () => {
        this.sendBookmark(w);
        const next = Date.now() + BOOKMARK_EVERY_MS;
        if (next < deadline - 2000) bookmarkAt(next);
      });
    const first = Math.min(Date.now() + BOOKMARK_EVERY_MS, deadline - 2000);
    if (w.bookmarks && first > Date.now()) bookmarkAt(first);
  }
}

const now = (): string => new Date().toISOString().replace(/\.\d+Z$/, "Z");
