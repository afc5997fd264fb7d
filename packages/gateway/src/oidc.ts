/**
 * OIDC ID token authentication, with `jose`: the issuer's discovery document and JWKS are fetched
 * over https (verified with --oidc-ca-file); a token signed with a key id the JWKS does not have
 * refetches the JWKS (key rotation), at most once per {@link JWKS_REFETCH_MIN_MS}. A token is
 * accepted when its signature verifies, `iss` is the issuer, `aud` holds the client id, `exp`,
 * `nbf` and `iat` hold within {@link CLOCK_SKEW_S} seconds, every required claim has its value, and,
 * when the user name is the claim `email`, `email_verified` is true.
 */
import {
  createLocalJWKSet,
  decodeJwt,
  errors,
  jwtVerify,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
} from "jose";
import type { UserInfo } from "./hub-api.js";
import { getJson } from "./https-json.js";
import { realClock, type Clock } from "@cluster-proxy/kit";

/** Seconds of clock skew tolerated on exp, nbf and iat. */
export const CLOCK_SKEW_S = 30;
/** The JWKS is refetched for an unknown key id at most this often. */
export const JWKS_REFETCH_MIN_MS = 10_000;

/** Settings of {@link OidcAuthenticator} (the --oidc-* flags). */
export interface OidcSettings {
  issuerUrl: string;
  clientId: string;
  ca?: Buffer;
  usernameClaim: string;
  /** "" gives `<issuer>#`, "-" none. */
  usernamePrefix: string;
  groupsClaim: string;
  groupsPrefix: string;
  /** `key=value` pairs. */
  requiredClaims: readonly string[];
  /**
   * The clock of the JWKS refetch limit and of `exp`, `nbf` and `iat`, read as Unix milliseconds
   * (default the kit's `realClock`, whose `now()` is `Date.now()`).
   */
  clock?: Clock;
}

/** The outcome of one token: not ours (another issuer, not a JWT), accepted, or refused with a reason. */
export type OidcResult =
  { kind: "unrecognized" } | { kind: "user"; user: UserInfo } | { kind: "refused"; reason: string };

type GetKey = ReturnType<typeof createLocalJWKSet>;

/** See the module comment. */
export class OidcAuthenticator {
  private readonly issuer: string;
  private readonly clock: Clock;
  private jwks: GetKey | undefined;
  private jwksUri: string | undefined;
  private lastFetch = -Infinity;
  private fetching: Promise<void> | undefined;
  private readonly required: [string, string][];

  constructor(private readonly settings: OidcSettings) {
    this.issuer = settings.issuerUrl;
    this.clock = settings.clock ?? realClock;
    this.required = settings.requiredClaims.map((kv) => {
      const eq = kv.indexOf("=");
      return [kv.slice(0, eq), kv.slice(eq + 1)];
    });
  }

  /** Authenticate `token`. Rejects only when the issuer cannot be reached and the keys are unknown. */
  async authenticate(token: string): Promise<OidcResult> {
    let claims: JWTPayload;
    try {
      claims = decodeJwt(token);
    } catch {
      return { kind: "unrecognized" };
    }
    if (claims.iss !== this.issuer) return { kind: "unrecognized" };
    let payload: JWTPayload;
    try {
      payload = await this.verify(token);
    } catch (err) {
      if (err instanceof errors.JOSEError) return { kind: "refused", reason: err.message };
      throw err;
    }
    return this.userOf(payload);
  }

  private async verify(token: string): Promise<JWTPayload> {
    if (!this.jwks) await this.refresh(true);
    const getKey: JWTVerifyGetKey = async (header, input) => {
      try {
        return await this.jwks!(header, input);
      } catch (err) {
        if (!(err instanceof errors.JWKSNoMatchingKey)) throw err;
        // An unknown key id: the issuer may have rotated its keys.
        await this.refresh(false);
        return this.jwks!(header, input);
      }
    };
    const { payload } = await jwtVerify(token, getKey, {
      issuer: this.issuer,
      audience: this.settings.clientId,
      clockTolerance: CLOCK_SKEW_S,
      requiredClaims: ["exp", "iat"],
      currentDate: new Date(this.clock.now()),
    });
    if (typeof payload.iat === "number" && payload.iat > this.clock.now() / 1000 + CLOCK_SKEW_S)
      throw new errors.JWTClaimValidationFailed(
        '"iat" claim timestamp check failed (issued in the future)',
        payload,
        "iat",
        "check_failed",
      );
    return payload;
  }

  private userOf(payload: JWTPayload): OidcResult {
    for (const [key, value] of this.required) {
      if (payload[key] !== value)
        return { kind: "refused", reason: `required claim "${key}" is missing or not "${value}"` };
    }
    const name = payload[this.settings.usernameClaim];
    if (typeof name !== "string" || name === "")
      return { kind: "refused", reason: `claim "${this.settings.usernameClaim}" (the user name) is missing` };
    // An unverified address is anyone's to claim: kube-apiserver refuses `email_verified: false`,
    // the gateway refuses a missing one too.
    if (this.settings.usernameClaim === "email" && payload.email_verified !== true)
      return {
        kind: "refused",
        reason: `claim "email_verified" is ${payload.email_verified === undefined ? "missing" : `${JSON.stringify(payload.email_verified)}, not true`}: the user name is the claim "email"`,
      };
    const s = this.settings;
    const userPrefix = s.usernamePrefix === "-" ? "" : s.usernamePrefix === "" ? `${this.issuer}#` : s.usernamePrefix;
    let groups: string[] = [];
    if (s.groupsClaim) {
      const g = payload[s.groupsClaim];
      if (typeof g === "string") groups = [g];
      else if (Array.isArray(g) && g.every((x) => typeof x === "string")) groups = g;
      else if (g !== undefined)
        return { kind: "refused", reason: `claim "${s.groupsClaim}" is not a string or a list of strings` };
    }
    return {
      kind: "user",
      user: { username: userPrefix + name, groups: groups.map((x) => s.groupsPrefix + x), extra: {} },
    };
  }

  /** Fetch the discovery document (once) and the JWKS; `force` ignores the refetch limit. */
  private async refresh(force: boolean): Promise<void> {
    if (this.fetching) return this.fetching;
    if (!force && this.clock.now() - this.lastFetch < JWKS_REFETCH_MIN_MS) return;
    this.fetching = (async () => {
      try {
        const ca = this.settings.ca ? { ca: this.settings.ca } : {};
        if (!this.jwksUri) {
          const doc = await getJson(`${this.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`, ca);
          const d = doc as { issuer?: unknown; jwks_uri?: unknown };
          if (d.issuer !== this.issuer)
            throw new Error(`discovery document names issuer ${String(d.issuer)}, not ${this.issuer}`);
          if (typeof d.jwks_uri !== "string") throw new Error("discovery document has no jwks_uri");
          this.jwksUri = d.jwks_uri;
        }
        const jwks = await getJson(this.jwksUri, ca);
        if (typeof jwks !== "object" || jwks === null || !Array.isArray((jwks as { keys?: unknown }).keys))
          throw new Error(`${this.jwksUri}: not a JWKS`);
        this.jwks = createLocalJWKSet(jwks as JSONWebKeySet);
        this.lastFetch = this.clock.now();
      } finally {
        this.fetching = undefined;
      }
    })();
    return this.fetching;
  }
}
