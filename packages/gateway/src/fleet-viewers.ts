/**
 * Who looks at the fleet view, and what they may see (docs/design/fleet-view.md, "Who sees
 * what"): the viewer authenticates exactly as for a cluster request (the gateway's
 * {@link Authenticator}; a pass-through token is refused here, 401), sees a cluster when a hub
 * SubjectAccessReview allows verb `get` on `managedclusters/proxy` (group
 * cluster.open-cluster-management.io) with the cluster as resource name, and sees its audit
 * records when the same is allowed on the subresource `managedclusters/proxy-audit`.
 *
 * One review without a resource name comes first: when it is allowed (a hub admin, a rule without
 * `resourceNames`), every cluster is visible and no review per cluster is made. Decisions are
 * the gateway {@link Authorizer}'s, cached for --authorization-cache-ttl, denials as long as
 * grants here (the view asks about every
 * cluster on every change: a denial kept for a second only would ask the hub about each cluster
 * of a large fleet every second); the reviews of one question run at most
 * {@link REVIEWS_AT_ONCE} at a time.
 */
import type { X509Certificate } from "node:crypto";
import type { FleetRequest, FleetViewer, ViewerResult } from "@cluster-proxy/fleet";
import type { Authenticator } from "./authentication.js";
import { CLUSTER_API_GROUP, type Authorizer } from "./authorization.js";
import { asGatewayError } from "./gateway-error.js";
import type { ResourceAttributes, UserInfo } from "./hub-api.js";

/** The subresource whose `get` lets a viewer see a cluster's audit records. */
export const AUDIT_SUBRESOURCE = "proxy-audit";
/** Hub reviews of one viewer question in flight at once. */
export const REVIEWS_AT_ONCE = 16;

/** Settings of {@link FleetViewers}. */
export interface FleetViewersSettings {
  authenticator: Authenticator;
  /** The gateway's authorizer: its reviews and its cache of decisions. */
  authorizer: Authorizer;
  /** The client certificate the TLS handshake of `req` verified, if any. */
  certificateOf(req: FleetRequest): X509Certificate | undefined;
}

/** See the module comment. */
export class FleetViewers {
  constructor(private readonly s: FleetViewersSettings) {}

  /** The viewer of `req`, or the refusal to answer with (401, 503). */
  async identify(req: FleetRequest): Promise<ViewerResult> {
    const authorization = req.headers.authorization;
    const clientCertificate = this.s.certificateOf(req);
    let user: UserInfo;
    try {
      const caller = await this.s.authenticator.authenticate({
        ...(authorization !== undefined ? { authorization } : {}),
        ...(clientCertificate ? { clientCertificate } : {}),
      });
      if (caller.method === "passthrough")
        return {
          ok: false,
          status: 401,
          message:
            "the fleet view needs a caller the hub recognises (a hub token, an OIDC token or a client certificate); pass-through tokens are refused here",
        };
      user = caller.user;
    } catch (err) {
      const e = asGatewayError(err);
      return { ok: false, status: e.status, message: e.message };
    }
    const viewer: FleetViewer = {
      name: user.username,
      visible: (clusters) => this.allowedOf(user, "proxy", clusters),
      auditable: (clusters) => this.allowedOf(user, AUDIT_SUBRESOURCE, clusters),
    };
    return { ok: true, viewer };
  }

  /** Of `clusters`, those on which `user` may `get` managedclusters/`subresource`. */
  private async allowedOf(
    user: UserInfo,
    subresource: string,
    clusters: readonly string[],
  ): Promise<ReadonlySet<string>> {
    const attrs = (name?: string): ResourceAttributes => ({
      group: CLUSTER_API_GROUP,
      resource: "managedclusters",
      subresource,
      verb: "get",
      ...(name !== undefined ? { name } : {}),
    });
    if (clusters.length === 0) return new Set();
    if (await this.s.authorizer.allowed(user, attrs(), true)) return new Set(clusters);
    const out = new Set<string>();
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < clusters.length; i = next++) {
        const c = clusters[i]!;
        if (await this.s.authorizer.allowed(user, attrs(c), true)) out.add(c);
      }
    };
    await Promise.all(Array.from({ length: Math.min(REVIEWS_AT_ONCE, clusters.length) }, worker));
    return out;
  }
}
