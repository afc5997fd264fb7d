/**
 * Admitting a request before any tunnel opens, in order: method (405), URL (400), authentication, the
 * caller's Impersonate-* headers, hub authorization, existence (404, only after), Service allowlist.
 * Design: docs/design/gateway.md#who-authenticates-and-authorizes-what-where
 */
import {
  CONTRACT_HEADER_PREFIX,
  GATEWAY_TARGETS,
  IMPERSONATE_EXTRA_PREFIX,
  IMPERSONATE_GROUP_HEADER,
  IMPERSONATE_HEADER_PREFIX,
  IMPERSONATE_UID_HEADER,
  IMPERSONATE_USER_HEADER,
  PASSTHROUGH_HEADER,
  PASSTHROUGH_VALUE,
  SERVICE_HEADER,
  TARGET_HEADER,
} from "@cluster-proxy/api";
import { CONNECTION_SPECIFIC_HEADERS, connectionOptions, type Timers } from "@cluster-proxy/kit";
import type { IncomingHttpHeaders } from "node:http";
import type { X509Certificate } from "node:crypto";
import { fromAggregatedUrl } from "./aggregated-api.js";
import type { Authenticator, Caller } from "./authentication.js";
import { impersonationOf, proxyVerbsOf, type Authorizer } from "./authorization.js";
import type { ClusterDirectory } from "./cluster-directory.js";
import type { ExposedServices } from "./exposed-services.js";
import { withForwarding } from "./forwarding-headers.js";
import { GatewayError } from "./gateway-error.js";
import type { UserInfo } from "./hub-api.js";
import { HUB_REVIEW_TIMEOUT_MS, HubDeadline } from "./hub-deadline.js";
import { kubeRequestInfo } from "./request-info.js";
import type { RequestRecord } from "./request-record.js";
import { parseRequestTarget, type RequestTarget } from "./request-target.js";

/**
 * Headers the gateway never forwards: connection-specific ones (kit's list: hop-by-hop, `Host`) and
 * the caller's credential (the agent gets an identity, never the caller's token, except in
 * pass-through, which sets it anew). Pseudo-headers, `Impersonate-*` and `Cluster-Proxy-*` go too.
 */
const DROPPED: ReadonlySet<string> = new Set([...CONNECTION_SPECIFIC_HEADERS, "authorization"]);

/** Printable ASCII: what a header value carries unchanged over both HTTP/1.1 and HTTP/2. */
const HEADER_SAFE = /^[\x20-\x7e]*$/;

/**
 * Refuse an identity a header cannot carry as it is. Node's HTTP/2 client keeps only the low byte
 * of each character (`š` would arrive as `a`: another user) and its HTTP/1.1 client throws on
 * characters above U+00FF, so such a name is refused (403) rather than impersonated as someone else.
 */
function refuseUnrepresentable(identity: UserInfo): void {
  const values = [
    identity.username,
    ...identity.groups,
    ...(identity.uid !== undefined ? [identity.uid] : []),
    ...Object.values(identity.extra).flat(),
  ];
  const bad = values.find((v) => !HEADER_SAFE.test(v));
  if (bad !== undefined)
    throw new GatewayError(
      403,
      "forbidden",
      `the identity's ${JSON.stringify(bad)} holds characters outside printable ASCII, which impersonation headers cannot carry unchanged; it is not impersonated`,
    );
}

/** What the gateway sends to the cluster's endpoint. */
export interface AdmittedRequest {
  cluster: string;
  target: RequestTarget;
  caller: Caller;
  /** The identity the cluster sees (before the prefix); undefined for pass-through. */
  identity?: UserInfo;
  path: string;
  headers: Record<string, string | string[]>;
}

/** What admission reads of a request. */
export interface RequestHead {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  clientCertificate?: X509Certificate;
  /** The caller's address, the TLS connection's peer (the TokenReview rate limit counts by it; Services get it as X-Forwarded-For). */
  source?: string;
  /** Whether this is an upgrade (Connection: Upgrade): relayed as one. */
  upgrade: boolean;
  /**
   * On a connection that carries the hub front proxy's certificate (`front-proxy.ts`): the user
   * its headers state, or "no-user". Absent on every other connection.
   */
  frontProxy?: UserInfo | "no-user";
}

/**
 * Whether `head` asks for an upgrade in any way (relayed as one, or carrying `Upgrade` or
 * `Connection: upgrade`): such a request needs the hub verb `create`, whatever becomes of it.
 */
export function asksUpgrade(head: RequestHead): boolean {
  return (
    head.upgrade || head.headers.upgrade !== undefined || connectionOptions(head.headers.connection).has("upgrade")
  );
}

/** Why an upgrade needs `create` (the end of a 403's message). */
const UPGRADE_NEEDS_CREATE = 'an upgrade such as exec, attach or port-forward needs "create"';

/** The parts admission uses. */
export interface AdmissionDeps {
  authenticator: Authenticator;
  authorizer: Authorizer;
  clusters: ClusterDirectory;
  services: ExposedServices;
  impersonationPrefix: string;
  /** Header names of the hub's front proxy (`X-Remote-User` and whatever else it is configured with): never forwarded. */
  isFrontProxyHeader?: (name: string) => boolean;
  /** Counts a denial (allowlist) by reason. */
  onDenial?: (reason: string) => void;
  /** How long the hub reviews of one request may take in all (default {@link HUB_REVIEW_TIMEOUT_MS}). */
  hubReviewTimeoutMs?: number;
  /** The timers of those deadlines (default the kit's `realClock`). */
  clock?: Timers;
}

/** Percent-encode an Impersonate-Extra key as the kube-apiserver decodes it. */
export function encodeExtraKey(key: string): string {
  return encodeURIComponent(key).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * The caller's headers that may go on: everything but {@link DROPPED}, the names the caller's
 * `Connection` header lists (hop-by-hop by RFC 9110 7.6.1, as the agent treats them),
 * pseudo-headers, Impersonate-*, Cluster-Proxy-*.
 */
function forwardable(
  headers: IncomingHttpHeaders,
  upgrade: boolean,
  isFrontProxyHeader: (name: string) => boolean,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const listed = connectionOptions(headers.connection);
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name.startsWith(":") || DROPPED.has(name) || listed.has(name)) continue;
    if (isFrontProxyHeader(name)) continue;
    if (name.startsWith(IMPERSONATE_HEADER_PREFIX) || name.startsWith(CONTRACT_HEADER_PREFIX)) continue;
    out[name] = value;
  }
  if (upgrade) {
    out.connection = "Upgrade";
    const up = headers.upgrade;
    if (up) out.upgrade = up;
  }
  return out;
}

/**
 * The caller: the user the hub's front proxy states on its own connection (whatever else the
 * request carries), else what the authenticator makes of the request's credentials.
 */
async function authenticate(deps: AdmissionDeps, head: RequestHead, deadline: HubDeadline): Promise<Caller> {
  if (head.frontProxy === "no-user")
    throw new GatewayError(401, "unauthenticated", "the hub apiserver forwarded the request without a user");
  if (head.frontProxy) return { method: "front-proxy", user: head.frontProxy };
  const authorization = head.headers.authorization;
  return deps.authenticator.authenticate(
    {
      ...(authorization !== undefined ? { authorization } : {}),
      ...(head.clientCertificate ? { clientCertificate: head.clientCertificate } : {}),
      ...(head.source !== undefined ? { source: head.source } : {}),
    },
    deadline,
  );
}

/** Admit `head` (see the module comment); throws a GatewayError when refused. */
export async function admit(deps: AdmissionDeps, head: RequestHead, rec: RequestRecord): Promise<AdmittedRequest> {
  const upgrade = asksUpgrade(head);
  const verbs = proxyVerbsOf(head.method, upgrade);
  if (!verbs)
    throw new GatewayError(
      405,
      "method-not-allowed",
      `method ${JSON.stringify(head.method.slice(0, 32))} is not supported`,
    );
  const aggregated = fromAggregatedUrl(head.url);
  if (typeof aggregated === "object")
    throw new GatewayError(400, "bad-request", `malformed gateway URL: ${aggregated.problem}`);
  const parsed = parseRequestTarget(aggregated ?? head.url);
  if (!parsed.ok) throw new GatewayError(400, "bad-request", `malformed gateway URL: ${parsed.problem}`);
  const target = parsed.target;
  const r = rec.record;
  r.cluster = target.cluster;
  if (target.kind === "kube") {
    const { verb, resource, subresource, namespace, name } = kubeRequestInfo(head.method, target.path, target.query);
    Object.assign(r, { verb, resource, subresource, namespace, name });
    if (resource === undefined) r.path = target.path;
    // `logs -f` runs as long as a watch.
    if (subresource === "log" && /(?:^\?|&)follow=(?:1|true)(?:&|$)/.test(target.query)) rec.markLongRunning();
  } else {
    r.service = `${target.scheme}://${target.service}.${target.namespace}:${target.port}`;
    r.verb = head.method.toLowerCase();
  }
  if (head.upgrade) r.upgrade = true;
  // As the kube-apiserver reads a WebSocket exec: the GET of an upgrade is a `create`.
  if (upgrade && r.verb === "get") r.verb = "create";

  // One deadline for the request's hub calls (TokenReview, SubjectAccessReviews, the ManagedCluster lookup), not one each.
  const deadline = new HubDeadline(deps.hubReviewTimeoutMs ?? HUB_REVIEW_TIMEOUT_MS, deps.clock);
  try {
    const caller = await authenticate(deps, head, deadline);
    r.authentication = caller.method;
    const headers = withForwarding(
      forwardable(head.headers, head.upgrade, deps.isFrontProxyHeader ?? (() => false)),
      head.source,
    );

    if (caller.method === "passthrough") {
      if (target.kind !== "kube")
        throw new GatewayError(
          403,
          "forbidden",
          `Service requests need a caller the hub recognises (cluster "${target.cluster}")`,
        );
      if (impersonationOf(head.headers))
        throw new GatewayError(
          403,
          "impersonation-forbidden",
          "Impersonate-* headers need a caller the hub recognises",
        );
      headers.authorization = caller.authorization;
      headers[PASSTHROUGH_HEADER] = PASSTHROUGH_VALUE;
      headers[TARGET_HEADER] = GATEWAY_TARGETS.kube;
      return { cluster: target.cluster, target, caller, path: target.path + target.query, headers };
    }

    let identity = caller.user;
    r.user = identity.username;
    r.groups = identity.groups;
    const impersonation = impersonationOf(head.headers);
    if (impersonation) {
      identity = await deps.authorizer.impersonate(identity, impersonation, deadline);
      r.impersonatedUser = identity.username;
      r.impersonatedGroups = identity.groups;
    }
    for (const verb of verbs)
      await deps.authorizer.authorizeCluster(
        identity,
        target.cluster,
        verb,
        upgrade && verb === "create" ? UPGRADE_NEEDS_CREATE : "",
        deadline,
      );
    const cluster = await deps.clusters.require(target.cluster, deadline);

    if (target.kind === "service") {
      const request = {
        namespace: target.namespace,
        service: target.service,
        port: target.port,
        protocol: target.scheme,
      };
      if (!deps.services.allows(cluster, request)) {
        deps.onDenial?.("service-not-exposed");
        throw new GatewayError(
          403,
          "service-not-exposed",
          `service ${target.namespace}/${target.service} port ${target.port} (${target.scheme}) is not exposed on cluster "${target.cluster}"`,
        );
      }
      headers[TARGET_HEADER] = GATEWAY_TARGETS.service;
      headers[SERVICE_HEADER] = `${target.scheme}://${target.service}.${target.namespace}.svc:${target.port}`;
    } else {
      // The identity goes to the kube-apiserver only: a Service gets no Impersonate-* headers.
      const prefix = deps.impersonationPrefix;
      refuseUnrepresentable(identity);
      headers[IMPERSONATE_USER_HEADER] = prefix + identity.username;
      if (identity.groups.length) headers[IMPERSONATE_GROUP_HEADER] = identity.groups.map((g) => prefix + g);
      if (identity.uid !== undefined) headers[IMPERSONATE_UID_HEADER] = identity.uid;
      for (const [key, vals] of Object.entries(identity.extra))
        headers[IMPERSONATE_EXTRA_PREFIX + encodeExtraKey(key)] = vals;
      headers[TARGET_HEADER] = GATEWAY_TARGETS.kube;
    }
    return { cluster: target.cluster, target, caller, identity, path: target.path + target.query, headers };
  } finally {
    // Admitted or refused, the request waits for no more hub reviews: its deadline's timer goes now.
    deadline.done();
  }
}
