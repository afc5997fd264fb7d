/**
 * Which hub tokens are gateway credentials: the audiences the hub TokenReview asks for and the answer
 * must name, and how the hub apiserver's own audiences are found.
 * Design: docs/design/gateway.md#token-audiences
 */
import { readFile } from "node:fs/promises";
import type { HubApi, TokenReviewResult } from "./hub-api.js";

/** Where a pod's own ServiceAccount token is mounted. */
export const MOUNTED_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/** Settings of {@link TokenAudiences} (the flags of the same names). */
export interface TokenAudienceSettings {
  /** --token-audiences (at least one). */
  tokenAudiences: readonly string[];
  /** --accept-hub-api-audience. */
  acceptHubApiAudience: boolean;
  /** The hub apiserver's audiences; empty: unknown. */
  hubApiAudiences: readonly string[];
}

/** The `aud` claim of the JWT in `file` (a list), or [] when there is no such file or it is no JWT. */
export async function tokenFileAudiences(file: string): Promise<string[]> {
  let token: string;
  try {
    token = (await readFile(file, "utf8")).trim();
  } catch {
    return [];
  }
  const payload = token.split(".")[1];
  if (token.split(".").length !== 3 || !payload) return [];
  try {
    const claims: unknown = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
    const aud = typeof claims === "object" && claims !== null && "aud" in claims ? claims.aud : undefined;
    if (typeof aud === "string") return aud === "" ? [] : [aud];
    return Array.isArray(aud) ? aud.filter((a): a is string => typeof a === "string" && a !== "") : [];
  } catch {
    return [];
  }
}

/** See the module comment. */
export class TokenAudiences {
  /** The audiences every review asks for. */
  readonly requested: readonly string[];

  constructor(
    private readonly hub: Pick<HubApi, "tokenReview">,
    private readonly s: TokenAudienceSettings,
  ) {
    this.requested = [...new Set([...s.tokenAudiences, ...(s.acceptHubApiAudience ? s.hubApiAudiences : [])])];
  }

  /**
   * The gateway's TokenReview (the Authenticator's hub): {@link review}, aborted with the signal the
   * Authenticator gives (every request waiting for it gave up), so that its hub request is closed then.
   */
  readonly reviewer: Pick<HubApi, "tokenReview"> = {
    tokenReview: (token, _audiences, signal) => this.review(token, signal),
  };

  /**
   * Review `token`: the user only when the token is valid for an audience the gateway accepts. The
   * hub calls are aborted when `signal` aborts.
   */
  async review(token: string, signal?: AbortSignal): Promise<TokenReviewResult> {
    const r = await this.hub.tokenReview(token, this.requested, signal);
    if (r.user) return this.accepted(r) ? r : {};
    if (!this.s.acceptHubApiAudience || this.s.hubApiAudiences.length > 0) return {};
    // The hub apiserver's audiences are unknown: ask for them the only way a review can.
    const own = await this.hub.tokenReview(token, undefined, signal);
    return own.user ? { user: own.user } : {};
  }

  private accepted(r: TokenReviewResult): boolean {
    const granted = r.audiences ?? [];
    if (granted.length === 0) return this.s.acceptHubApiAudience;
    return granted.some((a) => this.requested.includes(a));
  }
}
