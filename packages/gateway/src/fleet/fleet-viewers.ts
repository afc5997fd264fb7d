/**
 * Who looks at the fleet view and what they may see (hub SubjectAccessReviews on `managedclusters/proxy`
 * and `/proxy-audit`), with per-viewer caches that bound the reviews a viewer costs.
 * Design: docs/design/fleet-view.md#who-sees-what
 */
import type { X509Certificate } from "node:crypto";
import type { FleetRequest, FleetViewer, ViewerResult } from "@cluster-proxy/fleet";
import type { Authenticator } from "../authentication.js";
import { createHash } from "node:crypto";
import { CLUSTER_API_GROUP } from "../authorization.js";
import { GatewayError, asGatewayError } from "../gateway-error.js";
import type { HubApi, ResourceAttributes, UserInfo } from "../hub-api.js";
import { realClock, type Clock } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** The subresource whose `get` lets a viewer see a cluster's audit records. */
export const AUDIT_SUBRESOURCE = "proxy-audit";
/** Hub reviews of one viewer question in flight at once. */
export const REVIEWS_AT_ONCE = 16;
/** Viewer identities whose decisions are kept at most. */
export const MAX_VIEWERS = 4_096;

/** Settings of {@link FleetViewers}. */
export interface FleetViewersSettings {
  authenticator: Authenticator;
  /** The hub the SubjectAccessReviews go to. */
  hub: HubApi;
  /** How long a viewer's decisions are kept (--fleet-authorization-cache-ttl; 0: not kept). */
  cacheTtlMs: number;
  /** The client certificate the TLS handshake of `req` verified, if any. */
  certificateOf(req: FleetRequest): X509Certificate | undefined;
  /** The address `req` came from, if known (the TokenReview rate limit counts by it). */
  sourceOf?(req: FleetRequest): string | undefined;
  /**
   * What the hub's front proxy states for `req` when it came through it (the aggregated path): the
   * user it authenticated, believed as is (whatever else the request carries).
   */
  frontProxyOf?(req: FleetRequest): UserInfo | "no-user" | undefined;
  /** Counts a review the hub could not answer (metrics). */
  onUnavailable?: () => void;
  /** The decisions' cache clock (default the kit's `realClock`). */
  clock?: Clock;
}

/** One viewer's decisions about one subresource: the review without a name, and each cluster's. */
interface Decisions {
  expires: number;
  all: Promise<boolean>;
  clusters: Map<string, Promise<boolean>>;
}

/** See the module comment. */
export class FleetViewers {
  /** By viewer identity and subresource. */
  private readonly decisions = new Map<string, Decisions>();
  private readonly clock: Clock;

  constructor(private readonly s: FleetViewersSettings) {
    this.clock = s.clock ?? realClock;
  }

  /** The viewer of `req`, or the refusal to answer with (401, 503). */
  async identify(req: FleetRequest): Promise<ViewerResult> {
    const stated = this.s.frontProxyOf?.(req);
    if (stated === "no-user")
      return { ok: false, status: 401, message: "the hub apiserver forwarded the request without a user" };
    const user = stated ?? (await this.authenticated(req));
    if ("ok" in user) return user;
    const viewer: FleetViewer = {
      name: user.username,
      visible: (clusters) => this.allowedOf(user, "proxy", clusters),
      auditable: (clusters) => this.allowedOf(user, AUDIT_SUBRESOURCE, clusters),
    };
    return { ok: true, viewer };
  }

  /** The user the credentials of `req` authenticate (a hub token, OIDC, a client certificate), or the refusal. */
  private async authenticated(req: FleetRequest): Promise<UserInfo | Extract<ViewerResult, { ok: false }>> {
    const authorization = req.headers.authorization;
    const clientCertificate = this.s.certificateOf(req);
    const source = this.s.sourceOf?.(req);
    try {
      const caller = await this.s.authenticator.authenticate({
        ...(authorization !== undefined ? { authorization } : {}),
        ...(clientCertificate ? { clientCertificate } : {}),
        ...(source !== undefined ? { source } : {}),
      });
      if (caller.method === "passthrough")
        return {
          ok: false,
          status: 401,
          message:
            "the fleet view needs a caller the hub recognises (a hub token, an OIDC token or a client certificate); pass-through tokens are refused here",
        };
      return caller.user;
    } catch (err) {
      const e = asGatewayError(err);
      return { ok: false, status: e.status, message: e.message };
    }
  }

  /** Of `clusters`, those on which `user` may `get` managedclusters/`subresource`. */
  private async allowedOf(
    user: UserInfo,
    subresource: string,
    clusters: readonly string[],
  ): Promise<ReadonlySet<string>> {
    if (clusters.length === 0) return new Set();
    const d = this.decisionsOf(user, subresource);
    if (await d.all) return new Set(clusters);
    const out = new Set<string>();
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < clusters.length; i = next++) {
        const c = clusters[i]!;
        let decision = d.clusters.get(c);
        if (!decision) {
          decision = this.review(user, subresource, c);
          d.clusters.set(c, decision);
          void decision.catch(() => d.clusters.delete(c));
        }
        if (await decision) out.add(c);
      }
    };
    await Promise.all(Array.from({ length: Math.min(REVIEWS_AT_ONCE, clusters.length) }, worker));
    return out;
  }

  /** The decisions kept for `user` about `subresource`, fresh ones when they expired. */
  private decisionsOf(user: UserInfo, subresource: string): Decisions {
    const key = createHash("sha256")
      .update(JSON.stringify([subresource, user.username, [...user.groups].sort(), user.uid ?? null, user.extra]))
      .digest("hex");
    const now = this.clock.now();
    const kept = this.decisions.get(key);
    if (kept && kept.expires > now) return kept;
    this.decisions.delete(key);
    while (this.decisions.size >= MAX_VIEWERS) {
      const oldest = this.decisions.keys().next();
      if (oldest.done) break;
      this.decisions.delete(oldest.value);
    }
    const d: Decisions = { expires: now + this.s.cacheTtlMs, all: this.review(user, subresource), clusters: new Map() };
    // A hub that could not answer is asked again next time.
    void d.all.catch(() => this.decisions.get(key) === d && this.decisions.delete(key));
    if (this.s.cacheTtlMs > 0) this.decisions.set(key, d);
    return d;
  }

  /** One SubjectAccessReview: may `user` `get` managedclusters/`subresource` (`name`, or every one)? */
  private async review(user: UserInfo, subresource: string, name?: string): Promise<boolean> {
    const attrs: ResourceAttributes = {
      group: CLUSTER_API_GROUP,
      resource: "managedclusters",
      subresource,
      verb: "get",
      ...(name !== undefined ? { name } : {}),
    };
    try {
      return (await this.s.hub.subjectAccessReview(user, attrs)).allowed;
    } catch (err) {
      this.s.onUnavailable?.();
      throw new GatewayError(
        503,
        "authorization-unavailable",
        `the hub cannot authorize the request (SubjectAccessReview failed: ${errorMessage(err)})`,
        { cause: err },
      );
    }
  }
}
