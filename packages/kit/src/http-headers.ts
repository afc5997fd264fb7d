/**
 * The one list of hop-by-hop header names every relay drops (the gateway's admission and relay, the
 * agent's gateway endpoint both ways), and the fields a `Connection` header names.
 * Design: docs/design/gateway.md#hop-by-hop-headers
 */
export const HOP_BY_HOP_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "http2-settings",
  "proxy-authenticate",
  "proxy-authorization",
]);

/**
 * {@link HOP_BY_HOP_HEADERS} and `Host`: what a relay drops when it names the authority itself
 * (`:authority` over HTTP/2, its own `Host` over HTTP/1.1), and what never goes back in an answer.
 */
export const CONNECTION_SPECIFIC_HEADERS: ReadonlySet<string> = new Set([...HOP_BY_HOP_HEADERS, "host"]);

/**
 * The field names a `Connection` header lists (its connection options, RFC 9110 7.6.1), lowercased:
 * hop-by-hop too, whatever their name. `values`: the header's value or values.
 */
export function connectionOptions(values: string | readonly string[] | undefined): Set<string> {
  const names = new Set<string>();
  if (values === undefined) return names;
  for (const value of typeof values === "string" ? [values] : values)
    for (const token of value.split(",")) if (token.trim()) names.add(token.trim().toLowerCase());
  return names;
}

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
