/**
 * The client side of TLS 1.3 resumption: sessions kept per server and per own identity (a digest of
 * certificate, key, CA and server name), offered on the next connection, dropped when it fails.
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

/** A digest of a PEM-ish option (a string, a buffer or a list of them). */
function digestPart(h: ReturnType<typeof createHash>, value: unknown): void {
  const parts: unknown[] = Array.isArray(value) ? value : [value];
  for (const part of parts) {
    if (typeof part === "string" || Buffer.isBuffer(part)) {
      const b = typeof part === "string" ? Buffer.from(part) : part;
      h.update(`${b.length}:`);
      h.update(b);
    } else h.update(part === undefined ? "-" : "?");
    h.update(";");
  }
}

/**
 * The cache key of a connection to `where` (host:port) with `options`: the address and a digest of
 * the certificate, key, CA and SNI name, so that two identities never share a session.
 */
export function tlsSessionKey(where: string, options: tls.ConnectionOptions | undefined): string {
  const h = createHash("sha256");
  digestPart(h, options?.cert);
  digestPart(h, options?.key);
  digestPart(h, options?.ca);
  digestPart(h, options?.servername);
  return `${where}#${h.digest("base64url").slice(0, 22)}`;
}
