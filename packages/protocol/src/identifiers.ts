/**
 * The `agentidentifiers` metadata value: a URL query string such as
 * `host=east&host=east.ns&ipv4=10.0.0.1&default-route=true`, parsed with the rules of Go's
 * `url.ParseQuery` (the Go server's parser) so both accept and refuse the same inputs.
 */
import { ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";

/** Identifier kinds the Go agent accepts at startup. */
export const IDENTIFIER_TYPES = ["host", "ipv4", "ipv6", "cidr", "default-route"] as const;

/** The parsed identifiers of one agent. */
export interface AgentIdentifiers {
  host: string[];
  ipv4: string[];
  ipv6: string[];
  cidr: string[];
  defaultRoute: boolean;
}

/** An agent identifiers string that is not valid (see {@link parseAgentIdentifiers}). */
export class IdentifiersError extends ClusterProxyError<typeof ErrorCodes.agentIdentifiers> {
  constructor(message: string) {
    super(ErrorCodes.agentIdentifiers, message);
    this.name = "IdentifiersError";
  }
}

/** Go `url.QueryUnescape`: `+` is a space, `%XX` must be two hex digits. */
function queryUnescape(s: string): string {
  if (!s.includes("%") && !s.includes("+")) return s;
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      const hex = s.slice(i + 1, i + 3);
      if (!/^[0-9a-fA-F]{2}$/.test(hex)) throw new IdentifiersError(`invalid URL escape "${s.slice(i, i + 3)}"`);
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else if (c === 0x2b) bytes.push(0x20);
    else bytes.push(...Buffer.from(s[i] ?? "", "utf8"));
  }
  return Buffer.from(bytes).toString("utf8");
}

/**
 * Parse a query string into key -> values, like Go's `url.ParseQuery`. Throws the first error
 * (a `;` in a pair, a bad escape) as Go's server rejects the stream on any error.
 */
export function parseQuery(query: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const pair of query.split("&")) {
    if (pair.includes(";")) throw new IdentifiersError(`invalid semicolon separator in query "${query}"`);
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    const key = queryUnescape(eq < 0 ? pair : pair.slice(0, eq));
    const value = queryUnescape(eq < 0 ? "" : pair.slice(eq + 1));
    const list = out.get(key);
    if (list) list.push(value);
    else out.set(key, [value]);
  }
  return out;
}

/** Go `strconv.ParseBool`. */
function parseBool(v: string): boolean {
  if (["1", "t", "T", "TRUE", "true", "True"].includes(v)) return true;
  if (["0", "f", "F", "FALSE", "false", "False"].includes(v)) return false;
  throw new IdentifiersError(`default-route value "${v}" is not a boolean`);
}

/**
 * Parse an `agentidentifiers` value as the server does: unknown kinds are ignored, a bad
 * `default-route` value counts as false.
 */
export function parseAgentIdentifiers(value: string): AgentIdentifiers {
  const q = parseQuery(value);
  let defaultRoute = false;
  const dr = q.get("default-route")?.[0];
  if (dr !== undefined) {
    try {
      defaultRoute = parseBool(dr);
    } catch {
      defaultRoute = false;
    }
  }
  return {
    host: q.get("host") ?? [],
    ipv4: q.get("ipv4") ?? [],
    ipv6: q.get("ipv6") ?? [],
    cidr: q.get("cidr") ?? [],
    defaultRoute,
  };
}

/**
 * Validate identifiers as the Go agent does at startup (unknown kinds abort) and return them.
 * Used for our agent's `--agent-identifiers`.
 */
export function validateAgentIdentifiers(value: string): AgentIdentifiers {
  const q = parseQuery(value);
  for (const key of q.keys()) {
    if (!(IDENTIFIER_TYPES as readonly string[]).includes(key)) {
      throw new IdentifiersError(`unknown identifier type "${key}" (expected one of ${IDENTIFIER_TYPES.join(", ")})`);
    }
  }
  const dr = q.get("default-route")?.[0];
  if (dr !== undefined) parseBool(dr);
  return parseAgentIdentifiers(value);
}

/** Encode identifiers as the query string agents send. */
export function formatAgentIdentifiers(ids: Partial<AgentIdentifiers>): string {
  const parts: string[] = [];
  for (const h of ids.host ?? []) parts.push(`host=${encodeURIComponent(h)}`);
  for (const a of ids.ipv4 ?? []) parts.push(`ipv4=${encodeURIComponent(a)}`);
  for (const a of ids.ipv6 ?? []) parts.push(`ipv6=${encodeURIComponent(a)}`);
  for (const c of ids.cidr ?? []) parts.push(`cidr=${encodeURIComponent(c)}`);
  if (ids.defaultRoute) parts.push("default-route=true");
  return parts.join("&");
}
