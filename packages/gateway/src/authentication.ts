/**
 * Who is calling: a hub-reviewed bearer token, an OIDC ID token, or a client certificate; pass-through
 * or refusal otherwise. Two bounded caches and a per-source TokenReview rate limit guard the hub.
 * Design: docs/design/gateway.md#who-authenticates-and-authorizes-what-where
 */
import { hash, type X509Certificate } from "node:crypto";
import { GatewayError } from "./gateway-error.js";
import type { HubApi, TokenReviewResult, UserInfo } from "./hub-api.js";
import type { HubDeadline } from "./hub-deadline.js";
import type { OidcAuthenticator } from "./oidc.js";
import { SharedCalls } from "./shared-abort.js";
import { SourceBuckets, sourceKey } from "./source-buckets.js";
import { TtlCache } from "./ttl-cache.js";
import { realClock, type Clock } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** How a caller authenticated (the audit record's `authentication`). */
/** `front-proxy`: the hub apiserver authenticated the user and said who it is (`front-proxy.ts`). */
export type AuthenticationMethod = "token" | "oidc" | "x509" | "front-proxy" | "passthrough";

/** An authenticated caller. */
export type Caller =
  | { method: "token" | "oidc" | "x509" | "front-proxy"; user: UserInfo }
  /** A token the hub did not recognise, handed to the cluster as it is. */
  | { method: "passthrough"; authorization: string };

/** What the authenticator reads of a request. */
export interface Credentials {
  /** The Authorization header, if any. */
  authorization?: string;
  /** The client certificate, when the TLS handshake verified one against --client-ca-file. */
  clientCertificate?: X509Certificate;
  /** The caller's address (the TokenReview rate limit counts by it). */
  source?: string;
}

/** Settings of {@link Authenticator}. */
export interface AuthenticatorSettings {
  /** The hub's TokenReview (in the gateway: through `token-audiences.ts`). */
  hub: Pick<HubApi, "tokenReview">;
  tokenReview: boolean;
  cacheTtlMs: number;
  oidc?: OidcAuthenticator;
  passthroughUnrecognizedTokens: boolean;
  /** Hub TokenReviews per second per source address for tokens not cached (default 0: unlimited). */
  reviewRatePerSource?: number;
  /** The burst of {@link reviewRatePerSource} (default 1). */
  reviewBurstPerSource?: number;
  /** Entries of each cache, users and rejections (default 10,000). */
  maxCacheEntries?: number;
  /** Counts a refused or failed authentication by reason (metrics). */
  onFailure?: (reason: string) => void;
  /** Counts a request refused by the TokenReview rate limit (metrics). */
  onRateLimited?: () => void;
  /** The caches' and the rate limit's clock (default the kit's `realClock`). */
  clock?: Clock;
}

/** Rejections are cached at most this long (a token that just became valid is not refused for long). */
export const NEGATIVE_CACHE_MAX_MS = 5_000;

/** The user of a client certificate: CN the user, each O a group. */
export function userOfCertificate(cert: X509Certificate): UserInfo | undefined {
  const fields = cert.subject.split("\n");
  const cn = fields.find((f) => f.startsWith("CN="))?.slice(3);
  if (!cn) return undefined;
  const groups = fields.filter((f) => f.startsWith("O=")).map((f) => f.slice(2));
  return { username: cn, groups, extra: {} };
}

/** See the module comment. */
export class Authenticator {
  /** Tokens the hub recognised, by hash. */
  private readonly users: TtlCache<UserInfo>;
  /** Tokens the hub rejected, by hash: apart from {@link users}, so junk never evicts them. */
  private readonly rejected: TtlCache<true>;
  /** The TokenReviews under way, by token hash (one hub call per token at a time). */
  private readonly reviews = new SharedCalls<TokenReviewResult>();
  private readonly buckets: SourceBuckets;

  constructor(private readonly s: AuthenticatorSettings) {
    const clock = s.clock ?? realClock;
    const cache = { clock, maxEntries: s.maxCacheEntries ?? 10_000 };
    this.users = new TtlCache(cache);
    this.rejected = new TtlCache(cache);
    this.buckets = new SourceBuckets({
      ratePerSecond: s.reviewRatePerSource ?? 0,
      burst: s.reviewBurstPerSource ?? 1,
      maxSources: s.maxCacheEntries ?? 10_000,
      clock,
    });
  }

  /**
   * The caller of a request, or a GatewayError (401, or 503 when the hub cannot answer, or not
   * before `deadline`: the request's deadline for its hub reviews).
   */
  async authenticate(c: Credentials, deadline?: HubDeadline): Promise<Caller> {
    const auth = c.authorization;
    if (auth !== undefined && auth !== "") {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
      if (!m) return this.fail("bad-authorization", 401, "the Authorization header is not a bearer token");
      return this.bearer(m[1]!, auth, c.source, deadline);
    }
    if (c.clientCertificate) {
      const user = userOfCertificate(c.clientCertificate);
      if (!user) return this.fail("certificate-without-cn", 401, "the client certificate has no CN (the user name)");
      return { method: "x509", user };
    }
    return this.fail("no-credentials", 401, "no credentials: send a bearer token or a client certificate");
  }

  /**
   * The hub's answer about `token` (`key`: its digest) when no recognised user is cached for it:
   * from the cache of rejected tokens, else a TokenReview if the source's bucket has a token;
   * `limited` (seconds to wait) when it had none. Throws when the hub cannot answer.
   */
  private async review(
    token: string,
    key: string,
    source: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<TokenReviewResult | { limited: number }> {
    if (this.rejected.peek(key)) return {};
    const running = this.reviews.join(key, signal);
    if (running) return running;
    const wait = this.buckets.take(sourceKey(source));
    if (wait > 0) return { limited: wait };
    return this.reviews.start(key, signal, async (s) => {
      const r = await this.s.hub.tokenReview(token, undefined, s);
      if (r.user) this.users.set(key, r.user, this.s.cacheTtlMs);
      else this.rejected.set(key, true, Math.min(this.s.cacheTtlMs, NEGATIVE_CACHE_MAX_MS));
      return r;
    });
  }

  private async bearer(
    token: string,
    authorization: string,
    source: string | undefined,
    deadline: HubDeadline | undefined,
  ): Promise<Caller> {
    let hubDown: Error | undefined;
    let limited: number | undefined;
    if (this.s.tokenReview) {
      // A token the hub recognised lately needs neither the hub nor the deadline.
      const key = hash("sha256", token);
      const cached = this.users.peek(key);
      if (cached) return { method: "token", user: cached };
      try {
        const reviewing = this.review(token, key, source, deadline?.signal);
        const review = await (deadline ? deadline.race(reviewing, "TokenReview") : reviewing);
        if ("limited" in review) limited = review.limited;
        else if (review.user) return { method: "token", user: review.user };
      } catch (err) {
        hubDown = err as Error;
      }
    }
    if (this.s.oidc) {
      let result;
      try {
        result = await this.s.oidc.authenticate(token);
      } catch (err) {
        return this.fail("oidc-unavailable", 503, `cannot verify the OIDC token: ${errorMessage(err)}`, err);
      }
      if (result.kind === "user") return { method: "oidc", user: result.user };
      if (result.kind === "refused" && limited === undefined)
        return this.fail("oidc-refused", 401, `OIDC token refused: ${result.reason}`);
    }
    if (limited !== undefined) {
      // The hub was not asked: the token may be good, so this is neither a 401 nor a pass-through.
      this.s.onRateLimited?.();
      throw new GatewayError(
        429,
        "too-many-requests",
        `too many new bearer tokens from this address: at most ${this.s.reviewRatePerSource} hub TokenReviews per second (burst ${this.s.reviewBurstPerSource}) for tokens not cached (--token-review-rate-per-source)`,
        undefined,
        limited,
      );
    }
    if (hubDown)
      return this.fail(
        "token-review-unavailable",
        503,
        `the hub cannot review the token (TokenReview failed: ${hubDown.message})`,
        hubDown,
      );
    if (this.s.passthroughUnrecognizedTokens) return { method: "passthrough", authorization };
    return this.fail("token-unrecognized", 401, "the bearer token is not recognised");
  }

  private fail(reason: string, status: 401 | 503, message: string, cause?: unknown): never {
    this.s.onFailure?.(reason);
    throw new GatewayError(
      status,
      status === 401 ? "unauthenticated" : "authentication-unavailable",
      message,
      cause ? { cause } : undefined,
    );
  }
}
