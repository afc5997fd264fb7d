/**
 * Whether a caller may reach a cluster (a cached hub SubjectAccessReview on `managedclusters/proxy`, verb
 * from the method, `create` for upgrades) and may impersonate what it asks to; 503 when the hub cannot say.
 * Design: docs/design/gateway.md#who-authenticates-and-authorizes-what-where
 */
import { hash } from "node:crypto";
import { GatewayError } from "./gateway-error.js";
import type { HubApi, ResourceAttributes, UserInfo } from "./hub-api.js";
import type { HubDeadline } from "./hub-deadline.js";
import { TtlCache } from "./ttl-cache.js";
import type { Clock } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** The API group of ManagedClusters. */
export const CLUSTER_API_GROUP = "cluster.open-cluster-management.io";

/** Denials are cached at most this long (unless the caller asks to keep them). */
export const DENIAL_CACHE_MAX_MS = 1_000;
/** Cached decisions at most (the fleet view keeps a few per cluster per viewer). */
const MAX_DECISIONS = 100_000;

const VERB_OF_METHOD: Record<string, string> = {
  GET: "get",
  HEAD: "get",
  POST: "create",
  PUT: "update",
  PATCH: "patch",
  DELETE: "delete",
};

/**
 * The hub verb an HTTP method needs on managedclusters/proxy, or undefined (405). Methods are
 * case-sensitive (RFC 9110): `get` is not GET.
 */
export function proxyVerbOf(method: string): string | undefined {
  return Object.hasOwn(VERB_OF_METHOD, method) ? VERB_OF_METHOD[method] : undefined;
}

/**
 * The hub verbs a request needs on managedclusters/proxy, each checked in this order, or undefined
 * for a method the gateway does not serve (405). An upgrade (exec, attach, port-forward, over SPDY
 * or WebSocket; any `Upgrade`) needs `create`, as kube-apiserver 1.35+ asks `create` for the
 * WebSocket upgrades of pods/exec, attach and portforward even though they are GETs; an upgrade
 * with a method whose verb is neither `get` nor `create` needs that verb too (an upgrade does not
 * turn a DELETE into something less).
 */
export function proxyVerbsOf(method: string, upgrade: boolean): string[] | undefined {
  const verb = proxyVerbOf(method);
  if (verb === undefined) return undefined;
  if (!upgrade || verb === "create") return [verb];
  return verb === "get" ? ["create"] : [verb, "create"];
}

/** The identity a client asked for with Impersonate-* headers. */
export interface ImpersonationRequest {
  user: string;
  uid?: string;
  groups: string[];
  extra: Record<string, string[]>;
}

/** Header values as node gives them (a string, a list, or nothing). */
export type HeaderBag = Record<string, string | string[] | undefined>;

function values(v: string | string[] | undefined): string[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
}

/**
 * The Impersonate-* headers of a request, or undefined when there are none. Throws a 400
 * GatewayError for groups, uid or extras without a user, or a user given twice.
 */
export function impersonationOf(headers: HeaderBag): ImpersonationRequest | undefined {
  const users = values(headers["impersonate-user"]);
  const groups = values(headers["impersonate-group"]);
  const uids = values(headers["impersonate-uid"]);
  // A Map, then own properties: an object literal would take `Impersonate-Extra-__proto__` as its
  // prototype (the extra silently gone) instead of a key.
  const extras = new Map<string, string[]>();
  for (const [name, v] of Object.entries(headers)) {
    if (!name.startsWith("impersonate-extra-")) continue;
    let key: string;
    try {
      key = decodeURIComponent(name.slice("impersonate-extra-".length));
    } catch {
      throw new GatewayError(400, "bad-request", `malformed header ${name}`);
    }
    extras.set(
      key,
      values(v).flatMap((x) => x.split(",").map((s) => s.trim())),
    );
  }
  const extra: Record<string, string[]> = Object.fromEntries(extras);
  if (users.length === 0) {
    if (groups.length || uids.length || Object.keys(extra).length)
      throw new GatewayError(400, "bad-request", "Impersonate-Group, -Uid and -Extra-* need Impersonate-User");
    return undefined;
  }
  if (users.length > 1 || uids.length > 1)
    throw new GatewayError(400, "bad-request", "Impersonate-User and Impersonate-Uid may be given once");
  return { user: users[0]!, ...(uids[0] !== undefined ? { uid: uids[0] } : {}), groups, extra };
}

/** Settings of {@link Authorizer}. */
export interface AuthorizerSettings {
  hub: HubApi;
  cacheTtlMs: number;
  /** Counts a denial by reason (metrics). */
  onDenial?: (reason: string) => void;
  /** The decisions' cache clock (default the kit's `realClock`). */
  clock?: Clock;
}

function describeUser(user: UserInfo): string {
  return `user "${user.username}"`;
}

function describeAttributes(a: ResourceAttributes): string {
  const resource = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  const where = a.namespace ? ` in namespace "${a.namespace}"` : "";
  return `"${a.verb}" ${resource}${a.name !== undefined ? ` "${a.name}"` : ""}${where} in group ${a.group === "" ? '"" (core)' : a.group}`;
}

/** See the module comment. */
export class Authorizer {
  private readonly decisions: TtlCache<boolean>;

  constructor(private readonly s: AuthorizerSettings) {
    this.decisions = new TtlCache({ maxEntries: MAX_DECISIONS, ...(s.clock ? { clock: s.clock } : {}) });
  }

  /**
   * Resolve when `user` may `verb` managedclusters/proxy `cluster`; else a 403 (or 503)
   * GatewayError. `why` ends the message of a 403 (what needs the verb); the 503 comes at the
   * latest at `deadline` (the request's deadline for its hub reviews).
   */
  async authorizeCluster(
    user: UserInfo,
    cluster: string,
    verb: string,
    why = "",
    deadline?: HubDeadline,
  ): Promise<void> {
    const attrs = { group: CLUSTER_API_GROUP, resource: "managedclusters", subresource: "proxy", name: cluster, verb };
    if (!(await this.allowed(user, attrs, false, deadline)))
      this.deny(
        "cluster-proxy-denied",
        "forbidden",
        `${describeUser(user)} may not ${describeAttributes(attrs)}${why ? ` (${why})` : ""}`,
      );
  }

  /**
   * The identity that replaces `user` after checking that `user` may impersonate every part of
   * `req`; else a 403 naming the first part it may not (a 503 at the latest at `deadline`).
   */
  async impersonate(user: UserInfo, req: ImpersonationRequest, deadline?: HubDeadline): Promise<UserInfo> {
    const checks: ResourceAttributes[] = [];
    const sa = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(req.user);
    checks.push(
      sa
        ? { group: "", resource: "serviceaccounts", namespace: sa[1]!, name: sa[2]!, verb: "impersonate" }
        : { group: "", resource: "users", name: req.user, verb: "impersonate" },
    );
    for (const g of req.groups) checks.push({ group: "", resource: "groups", name: g, verb: "impersonate" });
    if (req.uid !== undefined)
      checks.push({ group: "authentication.k8s.io", resource: "uids", name: req.uid, verb: "impersonate" });
    for (const [key, vals] of Object.entries(req.extra))
      for (const v of vals)
        checks.push({
          group: "authentication.k8s.io",
          resource: "userextras",
          subresource: key,
          name: v,
          verb: "impersonate",
        });
    for (const attrs of checks) {
      if (!(await this.allowed(user, attrs, false, deadline)))
        this.deny(
          "impersonation-denied",
          "impersonation-forbidden",
          `${describeUser(user)} may not ${describeAttributes(attrs)}`,
        );
    }
    const groups = [...req.groups];
    if (req.user !== "system:anonymous" && !groups.includes("system:authenticated"))
      groups.push("system:authenticated");
    return { username: req.user, ...(req.uid !== undefined ? { uid: req.uid } : {}), groups, extra: req.extra };
  }

  /**
   * Whether the hub lets `user` do `attrs` (one SubjectAccessReview, cached for the TTL; a denial
   * for at most {@link DENIAL_CACHE_MAX_MS}, or as long as a grant with `keepDenials`, for callers
   * that ask about every cluster over and over, like the fleet view). A hub that cannot answer is
   * a 503 GatewayError, as is one that has not answered by `deadline` (the review goes on, for
   * the cache, only while another request without a passed deadline waits for it).
   */
  async allowed(
    user: UserInfo,
    attrs: ResourceAttributes,
    keepDenials = false,
    deadline?: HubDeadline,
  ): Promise<boolean> {
    const key = hash("sha256", JSON.stringify([user, attrs]));
    // A cached decision needs neither the hub nor the deadline.
    const cached = this.decisions.peek(key);
    if (cached !== undefined) return cached;
    try {
      const deciding = this.decisions.get(
        key,
        async (signal) => (await this.s.hub.subjectAccessReview(user, attrs, signal)).allowed,
        (ok) => (ok || keepDenials ? this.s.cacheTtlMs : Math.min(this.s.cacheTtlMs, DENIAL_CACHE_MAX_MS)),
        deadline?.signal,
      );
      return await (deadline ? deadline.race(deciding, "SubjectAccessReview") : deciding);
    } catch (err) {
      this.s.onDenial?.("authorization-unavailable");
      throw new GatewayError(
        503,
        "authorization-unavailable",
        `the hub cannot authorize the request (SubjectAccessReview failed: ${errorMessage(err)})`,
        { cause: err },
      );
    }
  }

  private deny(reason: string, kind: "forbidden" | "impersonation-forbidden", message: string): never {
    this.s.onDenial?.(reason);
    throw new GatewayError(403, kind, message);
  }
}
