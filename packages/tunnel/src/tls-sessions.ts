/**
 * The client side of TLS 1.3 resumption: sessions kept per server and per own identity (the shared
 * secure context and the server name), offered on the next connection, dropped when it fails.
 * Design: docs/design/decisions.md#tls-13-session-resumption-issue-41
 */
import * as tls from "node:tls";

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

/**
 * A number per secure context or server check function (never reused): a context stands for the
 * options it was made of.
 */
const objectIds = new WeakMap<object, number>();
let lastObjectId = 0;

function objectId(o: object): number {
  let id = objectIds.get(o);
  if (id === undefined) objectIds.set(o, (id = ++lastObjectId));
  return id;
}

/**
 * How the connection checks the server beyond its chain: node skips `checkServerIdentity` on a
 * resumed session, so a session is offered only by connections with the same check that, like
 * the one that got it, reject a server failing it (`rejectUnauthorized` other than false).
 */
function serverCheck(options: tls.ConnectionOptions): string {
  const check = options.checkServerIdentity;
  const id = check === undefined || check === tls.checkServerIdentity ? "" : objectId(check);
  return `${options.rejectUnauthorized === false ? "u" : "r"}${id}`;
}

/**
 * The cache key of a connection to `where` (host:port) with `options` as given to `tls.connect`:
 * the address, the secure context, the server check and the server name. A shared context is made
 * per the content of every option that makes our identity and our trust (certificate, key or pfx,
 * CA, CRL and the rest, see secure-contexts.ts), so two identities never share a session. Undefined for options
 * without a context (not shareable): no session is kept for them.
 */
export function tlsSessionKey(where: string, options: tls.ConnectionOptions): string | undefined {
  const context = options.secureContext;
  return context && `${where}#${objectId(context)}#${serverCheck(options)}#${options.servername ?? ""}`;
}

/**
 * `tls.connect(options)` offering the session `sessions` keeps for this identity at `where`
 * (host:port), keeping the tickets the server sends, and counting offers and resumptions. `options`
 * are those of the connection, after `SecureContextCache.withContext` (see {@link tlsSessionKey}).
 * `drop()` forgets the offered session and ignores tickets still to come: for a connection that
 * failed or was refused right after its handshake, so that the next one is a full handshake.
 * Without `sessions`, or for options that keep none, a plain `tls.connect`.
 */
export function connectResuming(
  sessions: TlsSessionCache | undefined,
  where: string,
  options: tls.ConnectionOptions,
): { socket: tls.TLSSocket; drop: () => void } {
  const key = sessions && tlsSessionKey(where, options);
  if (!sessions || key === undefined) return { socket: tls.connect(options), drop: () => undefined };
  const offered = sessions.get(key);
  const socket = tls.connect(offered ? { ...options, session: offered } : options);
  if (offered) sessions.stats.offered++;
  let dropped = false;
  socket.on("session", (session: Buffer) => {
    if (!dropped) sessions.set(key, session);
  });
  socket.once("secureConnect", () => {
    if (socket.isSessionReused()) sessions.stats.resumed++;
  });
  return {
    socket,
    drop: () => {
      dropped = true;
      sessions.delete(key);
    },
  };
}
