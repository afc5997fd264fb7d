/**
 * Who is calling: a bearer token reviewed by the hub (TokenReview, cached by a hash of the token),
 * then an OIDC ID token, then a client certificate from --client-ca-file (CN the user, O the
 * groups). A bearer token neither recognises is passed through to the cluster when
 * --passthrough-unrecognized-tokens is set, else refused; so is a request without credentials.
 * A hub that cannot answer is 503, not 401: the caller's credentials may well be good.
 */
import { createHash, type X509Certificate } from "node:crypto";
import { GatewayError } from "./gateway-error.js";
import type { HubApi, TokenReviewResult, UserInfo } from "./hub-api.js";
import type { OidcAuthenticator } from "./oidc.js";
import { TtlCache, type Clock } from "./ttl-cache.js";

/** How a caller authenticated (the audit record's `authentication`). */
export type AuthenticationMethod = "token" | "oidc" | "x509" | "passthrough";

/** An authenticated caller. */
export type Caller =
  | { method: "token" | "oidc" | "x509"; user: UserInfo }
  /** A token the hub did not recognise, handed to the cluster as it is. */
  | { method: "passthrough"; authorization: string };

/** What the authenticator reads of a request. */
export interface Credentials {
  /** The Authorization header, if any. */
  authorization?: string;
  /** The client certificate, when the TLS handshake verified one against --client-ca-file. */
  clientCertificate?: X509Certificate;
}

/** Settings of {@link Authenticator}. */
export interface AuthenticatorSettings {
  /** The hub's TokenReview (in the gateway: through `token-audiences.ts`). */
  hub: Pick<HubApi, "tokenReview">;
  tokenReview: boolean;
  cacheTtlMs: number;
  oidc?: OidcAuthenticator;
  passthroughUnrecognizedTokens: boolean;
  /** Counts a refused or failed authentication by reason (metrics). */
  onFailure?: (reason: string) => void;
  now?: Clock;
}

/** Rejections are cached at most this long (a token that just became valid is not refused for long). */
export const NEGATIVE_CACHE_MAX_MS = 1_000;

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
  private readonly reviews: TtlCache<TokenReviewResult>;

  constructor(private readonly s: AuthenticatorSettings) {
    this.reviews = new TtlCache({ ...(s.now ? { now: s.now } : {}) });
  }

  /** The caller of a request, or a GatewayError (401, or 503 when the hub cannot answer). */
  async authenticate(c: Credentials): Promise<Caller> {
    const auth = c.authorization;
    if (auth !== undefined && auth !== "") {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
      if (!m) return this.fail("bad-authorization", 401, "the Authorization header is not a bearer token");
      return this.bearer(m[1]!, auth);
    }
    if (c.clientCertificate) {
      const user = userOfCertificate(c.clientCertificate);
      if (!user) return this.fail("certificate-without-cn", 401, "the client certificate has no CN (the user name)");
      return { method: "x509", user };
    }
    return this.fail("no-credentials", 401, "no credentials: send a bearer token or a client certificate");
  }

  private async bearer(token: string, authorization: string): Promise<Caller> {
    let hubDown: Error | undefined;
    if (this.s.tokenReview) {
      try {
        const review = await this.reviews.get(
          createHash("sha256").update(token).digest("hex"),
          () => this.s.hub.tokenReview(token),
          (r) => (r.user ? this.s.cacheTtlMs : Math.min(this.s.cacheTtlMs, NEGATIVE_CACHE_MAX_MS)),
        );
        if (review.user) return { method: "token", user: review.user };
      } catch (err) {
        hubDown = err as Error;
      }
    }
    if (this.s.oidc) {
      let result;
      try {
        result = await this.s.oidc.authenticate(token);
      } catch (err) {
        return this.fail("oidc-unavailable", 503, `cannot verify the OIDC token: ${(err as Error).message}`, err);
      }
      if (result.kind === "user") return { method: "oidc", user: result.user };
      if (result.kind === "refused") return this.fail("oidc-refused", 401, `OIDC token refused: ${result.reason}`);
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
