/**
 * The client side of TLS 1.3 resumption: sessions kept per server and per own identity (a digest of
 * certificate, key or pfx, CA, CRL and server name), offered on the next connection, dropped when it fails.
 * Design: docs/design/decisions.md#tls-13-session-resumption-issue-41
 */
import { createHash } from "node:crypto";
import type * as tls from "node:tls";

/** Sessions kept at most by a cache (the oldest is dropped for a new one). */
const DEFAULT_MAX_SESSIONS = 256;

/** A bounded cache of TLS sessions (node's `session` option buffers) by server and identity. */
export class TlsSessionCache {
  private readonly entries = new Map<string, Buffer>();
  /** Sessions offered and resumed / offered and refused or not resumed, since creation. */
  readonly stats = { offered: 0, resumed: 0 };

  constructor(private readonly maxSessions = DEFAULT_MAX_SESSIONS) {}

  get(key: string): Buffer | undefined {
    return this.entries.get(key);
  }

  /** Keep `session` as the newest for `key`. */
  set(key: string, session: Buffer): void {
    this.entries.delete(key);
    this.entries.set(key, session);
    while (this.entries.size > this.maxSessions) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  /** Forget every session (the own certificate was reloaded or replaced). */
  clear(): void {
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}

/** The sessions of every `TunnelClient` and `dial` that was not given a cache of its own. */
export const sharedTlsSessions = new TlsSessionCache();

/** The options that make our identity and our trust in the server: a session is kept per their values. */
const IDENTITY_OPTIONS = ["cert", "key", "pfx", "ca", "crl", "allowPartialTrustChain", "servername"] as const;

/** A number per secure context a caller gave in place of the options (its content cannot be read). */
const contextIds = new WeakMap<tls.SecureContext, number>();
let lastContextId = 0;

function contextId(context: tls.SecureContext): number {
  let id = contextIds.get(context);
  if (id === undefined) contextIds.set(context, (id = ++lastContextId));
  return id;
}

/** The bytes of a PEM-ish part: a string, a buffer, or node's `{ pem }` (key) or `{ buf }` (pfx) object. */
function pemBytes(part: unknown): Buffer | undefined {
  if (typeof part === "string") return Buffer.from(part);
  if (Buffer.isBuffer(part)) return part;
  if (typeof part !== "object" || part === null) return undefined;
  const inner: unknown = "pem" in part ? part.pem : "buf" in part ? part.buf : undefined;
  return typeof inner === "string" || Buffer.isBuffer(inner) ? pemBytes(inner) : undefined;
}

/** A digest of option `name` (a PEM-ish part, a boolean, or a list of them), delimited from the next. */
function digestOption(h: ReturnType<typeof createHash>, name: string, value: unknown): void {
  if (value === undefined) return;
  const parts: unknown[] = Array.isArray(value) ? value : [value];
  h.update(`${name}=${parts.length}[`);
  for (const part of parts) {
    const bytes = pemBytes(part);
    if (bytes) {
      h.update(`${bytes.length}:`);
      h.update(bytes);
    } else h.update(typeof part === "boolean" ? String(part) : "?");
    h.update(";");
  }
  h.update("]");
}

/**
 * The cache key of a connection to `where` (host:port) with `options`: the address and a digest of
 * the certificate, key (or pfx), CA, CRL and SNI name, or of the secure context given instead,
 * so that two identities never share a session.
 */
export function tlsSessionKey(where: string, options: tls.ConnectionOptions | undefined): string {
  const h = createHash("sha256");
  for (const name of IDENTITY_OPTIONS) digestOption(h, name, options?.[name]);
  if (options?.secureContext) h.update(`secureContext=${contextId(options.secureContext)}`);
  return `${where}#${h.digest("base64url").slice(0, 22)}`;
}
