/**
 * Header names that belong to one connection, not to the message: hop-by-hop (RFC 9110 7.6.1)
 * and those HTTP/2 forbids (RFC 9113 8.2.2). A relay never copies them from one leg to the next.
 */
export const CONNECTION_SPECIFIC_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "http2-settings",
  "host",
]);

/** Prefixes of request header names by which callers claim an identity or a client address. */
const CALLER_CLAIM_PREFIXES = ["x-remote-", "x-forwarded-", "x-auth-request-", "x-client-", "x-original-"];
/** Whole request header names of the same kind (`Forwarded`, and CDN spellings of the client address). */
const CALLER_CLAIM_NAMES: ReadonlySet<string> = new Set([
  "forwarded",
  "x-real-ip",
  "true-client-ip",
  "x-cluster-client-ip",
  "cf-connecting-ip",
]);

/**
 * Whether `name` (lowercase) is a header by which a caller claims who it is or where it called
 * from (`X-Remote-User`, `X-Forwarded-For`, ...): only the gateway may state those, through its
 * contract headers, so both the gateway and the agent remove them before any upstream.
 */
export function isCallerClaimHeader(name: string): boolean {
  return CALLER_CLAIM_NAMES.has(name) || CALLER_CLAIM_PREFIXES.some((p) => name.startsWith(p));
}
