/**
 * HTTP/2 session set-up for tunnels: tuned windows (small windows cost ~40% of tunnel
 * throughput), TLS with ALPN `h2` (grpc-go refuses TLS without it) or a Unix socket, and
 * keepalive pings that detect a dead peer.
 */
import * as http2 from "node:http2";
import * as net from "node:net";
import * as tls from "node:tls";
import { ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";
import { SDK_TLS_OPTIONS as SDK_NAMES, describeConnectFailure, type TlsSettingNames } from "../tls-diagnosis.js";
import { sharedSecureContexts, type SecureContextCache } from "../secure-contexts.js";
import { connectResuming, type TlsSessionCache } from "../tls-sessions.js";
import { connectThroughProxy, type HttpProxy } from "./http-proxy.js";
import { SessionTransport } from "./session-transport.js";

/** Per-stream and per-connection receive window we advertise. */
export const TUNNEL_WINDOW_BYTES = 16 * 1024 * 1024;

/** Settings and memory limits for every tunnel HTTP/2 endpoint (server and client). */
export const TUNNEL_HTTP2_OPTIONS = {
  settings: {
    initialWindowSize: TUNNEL_WINDOW_BYTES,
    maxFrameSize: 256 * 1024,
    maxConcurrentStreams: 100_000,
  },
  // node's default (10 MB) is below what big windows can hold in flight: it would answer
  // ENHANCE_YOUR_CALM under load.
  maxSessionMemory: 512,
  maxOutstandingPings: 4,
} satisfies http2.SecureServerOptions & http2.ClientSessionOptions;

/** Widen the connection-level window of a session (the SETTINGS frame only covers streams). */
export function widenSessionWindow(session: http2.Http2Session): void {
  const apply = (): void => {
    try {
      session.setLocalWindowSize(TUNNEL_WINDOW_BYTES * 2);
    } catch {
      /* session already closed */
    }
  };
  if (session.connecting) session.once("connect", apply);
  else apply();
}

export interface ConnectTarget {
  /** host:port over TLS, or a Unix socket path (plain HTTP/2). */
  host?: string;
  port?: number;
  udsPath?: string;
  /** TLS options; `ALPNProtocols` defaults to `["h2"]` (a list given must include it). */
  tls?: tls.ConnectionOptions;
  /** Give up connecting after this long (ms). */
  timeoutMs?: number;
  /**
   * Once the server has accepted the TCP connection, give the TLS handshake and HTTP/2 set-up
   * this long instead (ms; default `timeoutMs`). A server that accepted is alive: under load it
   * may queue the handshake (see the server's handshake pacer), and giving up early only makes
   * the client retry and add to the load.
   */
  handshakeTimeoutMs?: number;
  /** How errors name the TLS settings (default: the client SDK's `proxy.*` options). */
  tlsNames?: TlsSettingNames;
  /** Abort the attempt (the half-open session is destroyed and the promise rejects). */
  signal?: AbortSignal;
  /** Go through this HTTP(S) forward proxy (`CONNECT host:port`), TLS to the peer inside it. */
  proxy?: HttpProxy;
  /** An already open byte stream to the peer to speak TLS over (set from `proxy`). */
  socket?: net.Socket;
  /**
   * TCP keepalive on the connection (ms of idle before the first probe; 0 or absent: off): a
   * server that vanished without a FIN is noticed even while the session is idle.
   */
  tcpKeepaliveMs?: number;
  /**
   * Resume TLS sessions: offer the session this cache holds for the server and our identity, and
   * keep the tickets the server sends (see tls-sessions.ts). A connection that offered a session
   * and failed drops it. Absent: every connection is a full handshake.
   */
  sessions?: TlsSessionCache;
  /** Where the TLS context of `tls` is kept (default: the process-wide {@link sharedSecureContexts}). */
  contexts?: SecureContextCache;
}

/** Raised when a tunnel connection cannot be established. */
export class ConnectError extends ClusterProxyError<typeof ErrorCodes.connect> {
  /**
   * No server took the connection: it was refused, reset or found no host before its TLS
   * handshake ended, so nothing was sent. A new connection to the same address may reach another
   * server (a Service that still lists a replica that just died).
   */
  readonly unreached: boolean;

  constructor(message: string, options?: ErrorOptions & { unreached?: boolean }) {
    super(ErrorCodes.connect, message, options);
    this.name = "ConnectError";
    this.unreached = options?.unreached ?? false;
  }
}

/** Socket error codes of a connection that no server took (see {@link ConnectError.unreached}). */
const UNREACHED_CODES: ReadonlySet<string> = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "EHOSTUNREACH"]);

/**
 * Whether `err`, a socket's error before its TLS handshake ended, means that no server took the
 * connection (refused, reset, no route to the host): nothing was sent.
 */
export function unreachedFailure(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code !== undefined && UNREACHED_CODES.has(code);
}

/** Why each session's transport failed, explained (see {@link sessionFailure}). */
const transportFailures = new WeakMap<http2.Http2Session, string>();

/**
 * Why `session`'s connection failed after it was established, explained (e.g. a TLS 1.3 server
 * refusing our certificate once we considered the handshake done), or undefined.
 */
export function sessionFailure(session: http2.Http2Session | undefined): string | undefined {
  return session ? transportFailures.get(session) : undefined;
}

/**
 * Open an HTTP/2 session and resolve once it is connected (TLS verified, ALPN `h2`). The session
 * runs on a {@link SessionTransport}, so it keeps reading while its writes wait for the peer.
 */
export function connectSession(target: ConnectTarget): Promise<http2.ClientHttp2Session> {
  if (target.proxy && !target.udsPath) {
    const { proxy, ...direct } = target;
    const started = Date.now();
    const timeoutMs = target.timeoutMs ?? 10_000;
    return connectThroughProxy(proxy, target.host ?? "127.0.0.1", target.port ?? 443, {
      timeoutMs,
      ...(target.signal ? { signal: target.signal } : {}),
    }).then(
      (socket) => connectSession({ ...direct, socket, timeoutMs: Math.max(1, timeoutMs - (Date.now() - started)) }),
      (err: Error) => Promise.reject(new ConnectError(err.message, { cause: err })),
    );
  }
  return new Promise((resolve, reject) => {
    const where = target.udsPath ?? `${target.host}:${target.port}`;
    let socket: net.Socket;
    let url: string;
    /**
     * A connection that failed or was refused right after its handshake: the session it offered
     * and the tickets it got are dropped, so the next attempt is a full handshake.
     */
    let dropOffered = (): void => undefined;
    if (target.udsPath) {
      socket = net.connect(target.udsPath);
      url = "http://localhost";
    } else {
      const host = target.host ?? "127.0.0.1";
      const options = (target.contexts ?? sharedSecureContexts).withContext({
        ...target.tls,
        ...(target.socket ? { socket: target.socket } : { host, port: target.port }),
        ALPNProtocols: target.tls?.ALPNProtocols ?? ["h2"],
        servername: target.tls?.servername ?? (net.isIP(host) ? undefined : host),
      });
      const connected = connectResuming(target.sessions, where, options);
      socket = connected.socket;
      dropOffered = connected.drop;
      url = `https://${host.includes(":") ? `[${host}]` : host}:${target.port}`;
    }
    let session: http2.ClientHttp2Session | undefined;
    let settled = false;
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      clearTimeout(timer);
      target.signal?.removeEventListener("abort", onAbort);
      socket.off("error", onError);
      return true;
    };
    const fail = (err: ConnectError): void => {
      if (!settle()) return;
      dropOffered();
      session?.destroy();
      socket.destroy();
      reject(err);
    };
    const timeoutMs = target.timeoutMs ?? 10_000;
    let timer = setTimeout(
      () => fail(new ConnectError(`connecting to ${where} timed out after ${timeoutMs} ms`)),
      timeoutMs,
    );
    const handshakeMs = target.handshakeTimeoutMs;
    const awaitHandshake = (): void => {
      if (settled || handshakeMs === undefined) return;
      clearTimeout(timer);
      timer = setTimeout(
        () =>
          fail(
            new ConnectError(
              `the TLS handshake with ${where} did not finish within ${handshakeMs} ms (the server accepted the connection but did not complete the handshake: overloaded?)`,
            ),
          ),
        handshakeMs,
      );
    };
    const keepalive = target.tcpKeepaliveMs ?? 0;
    const keepAlive = (): void => {
      if (keepalive > 0) (target.socket ?? socket).setKeepAlive(true, keepalive);
    };
    // Through a forward proxy the byte stream is already connected: the handshake starts now.
    if (target.socket && !target.udsPath) {
      keepAlive();
      awaitHandshake();
    } else if (!target.udsPath) {
      socket.once("connect", () => {
        keepAlive();
        awaitHandshake();
      });
    }
    const names = target.tlsNames ?? SDK_NAMES;
    let handshaken = false;
    const onError = (err: Error): void =>
      fail(
        new ConnectError(`cannot connect to ${where}: ${describeConnectFailure(err, names, where)}`, {
          cause: err,
          unreached: !handshaken && unreachedFailure(err),
        }),
      );
    // After the session is up, a transport error is recorded for the calls that it ends. A TLS
    // server that refuses our certificate may do so only after our side of the handshake is done
    // (TLS 1.3; node servers then just reset): a connection that ends before the server said a
    // word of HTTP/2 was refused, and the message says which setting to look at.
    let heard = false;
    const record = (err?: Error): void => {
      if (!settled || !session || transportFailures.has(session)) return;
      if (!heard) dropOffered();
      const explained = err ? describeConnectFailure(err, names, where) : undefined;
      if (explained !== undefined && explained !== err?.message) transportFailures.set(session, explained);
      else if (!heard && !target.udsPath) {
        transportFailures.set(
          session,
          `${where} closed the connection right after the TLS handshake, before any HTTP/2: it refused ${names.cert} (not signed by ${names.serverCa}, expired, or not a client certificate; the server's log names the reason)${err ? ` [${err.message}]` : ""}`,
        );
      }
    };
    socket.on("error", (err) => record(err));
    socket.once("end", () => record());
    const onAbort = (): void => onError(new ConnectError("connect aborted"));
    target.signal?.addEventListener("abort", onAbort, { once: true });
    if (target.signal?.aborted) onAbort();
    socket.once("error", onError);
    socket.once(target.udsPath ? "connect" : "secureConnect", () => {
      handshaken = true;
      if (settled) return;
      const alpn = socket instanceof tls.TLSSocket ? socket.alpnProtocol : false;
      // (An agent may offer other protocols before h2 with --alpn-proto; HTTP/1.1 is never gRPC.)
      if (alpn === "http/1.1") {
        fail(
          new ConnectError(
            `cannot connect to ${where}: wrong port or protocol: the server chose ALPN "${alpn}" instead of h2 (HTTP/2): not a gRPC port (an HTTP CONNECT port speaks http/1.1)`,
          ),
        );
        return;
      }
      const s = http2.connect(url, { ...TUNNEL_HTTP2_OPTIONS, createConnection: () => new SessionTransport(socket) });
      session = s;
      // After the transport's own listener (it must see every byte): did the server say anything,
      // and was it HTTP/2? An HTTP/1 server answers our connection preface with a status line.
      socket.once("data", (chunk: Buffer) => {
        heard = true;
        const answer = httpOneStatusLine(chunk);
        if (answer === undefined) return;
        const why = `wrong port or protocol: ${where} answered in HTTP/1 ("${answer}"), not HTTP/2: not a gRPC port (an HTTP CONNECT port, or another HTTP server?)`;
        // Over a Unix socket the session counts as connected before the server said a word.
        if (!settled) fail(new ConnectError(`cannot connect to ${where}: ${why}`));
        else if (!transportFailures.has(s)) {
          transportFailures.set(s, why);
          s.destroy();
        }
      });
      // The JS stream node puts between the session and the transport holds no libuv handle:
      // ref()/unref() must reach the socket, or an idle session would keep the process alive.
      const ref = s.ref.bind(s);
      const unref = s.unref.bind(s);
      s.ref = () => {
        ref();
        socket.ref();
      };
      s.unref = () => {
        unref();
        socket.unref();
      };
      s.once("error", onError);
      s.once("connect", () => {
        if (!settle()) return;
        s.off("error", onError);
        s.on("error", () => {
          /* surfaced through "close" of the session and its streams */
        });
        widenSessionWindow(s);
        resolve(s);
      });
    });
  });
}

/** The status line of an HTTP/1 response that `bytes` start with, or undefined. */
function httpOneStatusLine(bytes: Buffer): string | undefined {
  if (bytes.subarray(0, 5).toString("latin1") !== "HTTP/") return undefined;
  const end = bytes.indexOf("\r\n");
  return bytes
    .subarray(0, end < 0 ? Math.min(bytes.length, 80) : Math.min(end, 80))
    .toString("latin1")
    .replace(/[^\x20-\x7e]/g, "?");
}

/**
 * Ping the peer once; destroy the session if the answer takes longer than `timeoutMs`. `settled`
 * runs once the ping is over, with whether the peer answered (false: it failed, timed out or was
 * cancelled). Returns a function that cancels the wait.
 */
function pingWithDeadline(
  session: http2.Http2Session,
  timeoutMs: number,
  onDead: (reason: string) => void,
  settled: (answered: boolean) => void,
): () => void {
  let deadline: NodeJS.Timeout | undefined;
  let over = false;
  const finish = (answered: boolean): void => {
    if (over) return;
    over = true;
    clearTimeout(deadline);
    deadline = undefined;
    settled(answered);
  };
  // An overloaded process must not mistake its own slowness for a dead peer (issue 18: that
  // turned a busy server into a reconnect storm of healthy agents). The verdict waits for the
  // event loop's I/O phase (setImmediate), where an answer that is already in the socket is read,
  // and a deadline that fired late by half the timeout or more (this process was stalled, not
  // the peer) is extended once.
  const arm = (ms: number, extended: boolean): void => {
    const armedAt = performance.now();
    const timer = setTimeout(() => {
      const lateMs = performance.now() - armedAt - ms;
      setImmediate(() => {
        if (deadline !== timer || session.destroyed) return; // answered meanwhile
        if (!extended && lateMs >= timeoutMs / 2) {
          arm(timeoutMs, true);
          return;
        }
        finish(false);
        onDead(`no keepalive answer within ${timeoutMs} ms`);
        session.destroy();
      });
    }, ms);
    timer.unref();
    deadline = timer;
  };
  arm(timeoutMs, false);
  try {
    session.ping((err) => {
      if (over) return;
      finish(!err);
      if (err && !session.destroyed) {
        onDead(`keepalive ping failed: ${err.message}`);
        session.destroy();
      }
    });
  } catch {
    finish(false);
  }
  return () => finish(false);
}

/**
 * Ping the peer every `intervalMs`; destroy the session if an answer takes longer than
 * `timeoutMs`. Returns a function that stops pinging.
 */
export function keepSessionAlive(
  session: http2.Http2Session,
  intervalMs: number,
  timeoutMs: number,
  onDead: (reason: string) => void,
): () => void {
  if (intervalMs <= 0) return () => undefined;
  let pending: (() => void) | undefined;
  const tick = setInterval(() => {
    // A closing session (GOAWAY sent, or received with NO_ERROR) cannot ping: node cancels the
    // ping. Its streams finish and whoever closed it bounds how long (a drain timeout).
    if (pending || session.destroyed || session.closed) return;
    pending = pingWithDeadline(session, timeoutMs, onDead, () => (pending = undefined));
  }, intervalMs);
  tick.unref();
  const stop = (): void => {
    clearInterval(tick);
    pending?.();
  };
  session.once("close", stop);
  return stop;
}

/** How long a server session may go without a frame before it is first probed ({@link probeIdleSession}). */
export const IDLE_PROBE_MS = 5_000;

/**
 * The longest quiet period between two probes of a session that keeps answering: the period
 * doubles from {@link IDLE_PROBE_MS} after every answer up to this, so 10,000 agents that never send
 * a frame cost ~170 pings a second, not 2,000, and a peer gone silent is still found within a
 * minute and the probe's timeout.
 */
export const IDLE_PROBE_MAX_MS = 60_000;

/**
 * Ask a session that went quiet whether it is still there: after `idleMs` without a frame either
 * way (node's session timeout), ping it; no answer within `timeoutMs` destroys it, an answer
 * starts the next quiet period, twice as long as the last, up to `maxIdleMs` (default `idleMs`:
 * no growth). Returns a function that stops probing.
 *
 * This is what frees a session nghttp2 has ended by itself (issue 25): on a protocol error (an
 * oversized frame, a header block too large) or a flood (rapid reset) it sends GOAWAY and then
 * neither reads nor writes again, node emits nothing and never closes the socket, and a client
 * that keeps its end open held the socket, its descriptor and memory for as long as it liked.
 * A healthy peer answers the ping at once (every HTTP/2 endpoint must); a dead one cannot.
 */
export function probeIdleSession(
  session: http2.Http2Session,
  idleMs: number,
  timeoutMs: number,
  onDead: (reason: string) => void,
  maxIdleMs: number = idleMs,
): () => void {
  if (idleMs <= 0 || session.destroyed) return () => undefined;
  let pending: (() => void) | undefined;
  let stopped = false;
  let quietMs = idleMs;
  // A listener of our own, not setTimeout's callback: node adds that one with once(), so it would
  // hear only the first quiet period and every later one would pass unprobed.
  const onQuiet = (): void => {
    // Not a session node closed gracefully (a drain's GOAWAY): node cancels its pings. A session
    // nghttp2 ended by itself is not "closed" to node, and is probed (and freed) as before.
    if (pending || stopped || session.destroyed || session.closed) return;
    pending = pingWithDeadline(session, timeoutMs, onDead, (answered) => {
      pending = undefined;
      // Answered: watch the next, longer quiet period (node's timer restarts on every frame).
      if (!answered || stopped || session.destroyed) return;
      quietMs = Math.min(quietMs * 2, Math.max(maxIdleMs, idleMs));
      session.setTimeout(quietMs);
    });
  };
  session.on("timeout", onQuiet);
  session.setTimeout(idleMs);
  const stop = (): void => {
    stopped = true;
    pending?.();
    session.off("timeout", onQuiet);
    if (!session.destroyed) session.setTimeout(0);
  };
  session.once("close", stop);
  return stop;
}
