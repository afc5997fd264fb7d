/**
 * Dialling through the hub's HTTP CONNECT front door: `CONNECT host:port HTTP/1.1`, then the
 * socket itself is the tunnel.
 */
import * as net from "node:net";
import * as tls from "node:tls";
import type { Clock } from "@cluster-proxy/kit";
import { DialErrors, parseHostPort } from "@cluster-proxy/protocol";
import {
  DialError,
  SDK_TLS_OPTIONS,
  connectResuming,
  describeConnectFailure,
  sharedSecureContexts,
  unreachedFailure,
  sharedTlsSessions,
  type TlsSessionCache,
} from "@cluster-proxy/tunnel";
import { connectAgain } from "./connect-again.js";
import { dialAbortError, remainingMs, startDialLimits, dialTimeoutError, type DialLimits } from "./dial-limits.js";
import {
  DEFAULT_TCP_KEEPALIVE_MS,
  DEFAULT_DIAL_TIMEOUT_MS,
  describeProxy,
  proxyTlsError,
  tlsOptionsOf,
  type DialOptions,
  type ProxyOptions,
} from "./options.js";

/** Largest response header (and error body) we read from the proxy. */
const MAX_RESPONSE_BYTES = 64 * 1024;

/**
 * Where the CONNECT door is. TLS (mutual, with `ca`/`cert`/`key` or the `tls` options) is used
 * for TCP when `tls` is given or any of `ca`/`cert`/`key` is set; plain otherwise (the hub only
 * serves plain CONNECT on a Unix socket or loopback). `udsPath` is always plain.
 */
export interface ConnectProxyOptions extends ProxyOptions {
  /** Extra node:tls options for the connection to the proxy (merged over ca/cert/key/servername). */
  tls?: tls.ConnectionOptions;
}

/** Options of {@link dialConnect}. */
export interface DialConnectOptions extends DialOptions {
  proxy: ConnectProxyOptions;
  /**
   * TLS session resumption with the CONNECT door: where sessions are kept (default: the
   * process-wide cache every `dial`, `TunnelClient` and `dialConnect` shares, keyed by the door's
   * address and this client's certificate, key and CA, so a replaced certificate never resumes
   * the old one's sessions); `false`: every connection is a full handshake.
   */
  tlsSessions?: TlsSessionCache | false;
  /**
   * TCP keepalive on the connection to the CONNECT door: ms of idle before the first probe
   * (default {@link DEFAULT_TCP_KEEPALIVE_MS}; 0: off), so that a server that vanished without a
   * FIN ends the returned socket (with an error) instead of leaving it open forever.
   */
  tcpKeepaliveMs?: number;
  /**
   * The clock of the dial's deadline (tests; default the kit's `keepAliveClock`: the wait keeps the
   * process alive, as it is what its caller waits for).
   */
  clock?: Clock;
}

/** The proxy answered CONNECT with an error status; `statusCode` and `body` are its answer. */
export class HttpConnectError extends DialError {
  constructor(
    readonly statusCode: number,
    readonly statusText: string,
    readonly body: string,
  ) {
    super(
      `proxy answered CONNECT with ${statusCode}${statusText ? ` ${statusText}` : ""}${body ? `: ${body}` : ""}`,
      "endpoint",
    );
    this.name = "HttpConnectError";
  }
}

interface ParsedHead {
  statusCode: number;
  statusText: string;
  headers: Map<string, string>;
  /** Bytes after the blank line. */
  rest: Buffer;
}

/** Parse one HTTP/1.x response head if `buf` holds it complete; undefined if more is needed. */

/** Why the proxy may have closed a connection before answering CONNECT. */
function closedUnanswered(
  socket: net.Socket,
  proxy: ConnectProxyOptions,
  address: string,
  heard: boolean,
  secured: boolean,
): string {
  const where = describeProxy(proxy);
  const base = `proxy ${where} closed the connection before answering CONNECT ${address}`;
  if (heard || proxy.udsPath) return base;
  if (socket instanceof tls.TLSSocket && !secured) {
    return `${base}: before the TLS handshake ended (is this the proxy-server's TLS CONNECT port? A server shedding handshakes under load closes like this too; its log says so)`;
  }
  if (socket instanceof tls.TLSSocket) {
    return `${base}: right after the TLS handshake, so it most likely refused proxy.cert (not signed by the server's --server-ca-cert, expired, or not a client certificate; the server's log names the reason)`;
  }
  return `${base}: wrong port or protocol? (plaintext CONNECT to a TLS port closes like this: give proxy.ca, proxy.cert and proxy.key)`;
}

function parseHead(buf: Buffer): ParsedHead | undefined {
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return undefined;
  const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0] ?? "");
  if (!m) {
    throw new DialError(
      `wrong port or protocol: the proxy did not answer with HTTP/1.1 (it sent ${JSON.stringify(lines[0]?.slice(0, 40))}): is this the HTTP CONNECT port?`,
      "unknown",
    );
  }
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const i = line.indexOf(":");
    if (i > 0) headers.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
  }
  return { statusCode: Number(m[1]), statusText: m[2] ?? "", headers, rest: buf.subarray(end + 4) };
}

/** True while `buf` could still be the start of an HTTP/1.x status line. */
function mayBeStatusLine(buf: Buffer): boolean {
  const prefix = "HTTP/1.";
  const n = Math.min(buf.length, prefix.length);
  return buf.subarray(0, n).toString("latin1") === prefix.slice(0, n);
}

function openProxySocket(
  proxy: ConnectProxyOptions,
  sessions: TlsSessionCache | undefined,
  tcpKeepaliveMs: number,
): net.Socket {
  if (proxy.udsPath) return net.connect(proxy.udsPath);
  const socket = openTcpProxySocket(proxy, sessions);
  if (tcpKeepaliveMs > 0) socket.setKeepAlive(true, tcpKeepaliveMs);
  return socket;
}

function openTcpProxySocket(proxy: ConnectProxyOptions, sessions: TlsSessionCache | undefined): net.Socket {
  const host = proxy.host ?? "127.0.0.1";
  const port = proxy.port ?? 0;
  const useTls =
    proxy.tls !== undefined || proxy.ca !== undefined || proxy.cert !== undefined || proxy.key !== undefined;
  // The tunnel carries whatever the caller writes, often small requests: no Nagle delay.
  if (!useTls) return net.connect({ host, port, noDelay: true });
  const options: tls.ConnectionOptions = {
    host,
    port,
    ...(net.isIP(host) ? {} : { servername: host }),
    ...tlsOptionsOf(proxy),
    ...proxy.tls,
    ALPNProtocols: ["http/1.1"],
  };
  const { socket, drop } = connectResuming(sessions, `${host}:${port}`, sharedSecureContexts.withContext(options));
  socket.setNoDelay(true);
  if (sessions) {
    // Refused (e.g. a resumed session whose certificate expired): the next connection is a full handshake.
    let heard = false;
    socket.once("data", () => (heard = true));
    socket.once("error", drop);
    socket.once("close", () => {
      if (!heard) drop();
    });
  }
  return socket;
}

/**
 * Open a tunnelled TCP connection to `address` through the hub's HTTP CONNECT door. Resolves
 * with the raw socket to the proxy once it answered `200`; bytes the proxy already sent past
 * its answer are put back so you read them first.
 *
 * Rejects with {@link HttpConnectError} for an error status (e.g. 500 `currently no tunnels
 * available: No agent available`, 502 `dial tcp ...: connection refused`), also when an older
 * Go server sends `200` immediately followed by an `HTTP/1.1 5xx` answer; with a `DialError` of
 * reason `timeout` or `context`; or with the socket's error when the proxy is unreachable.
 *
 * A `503` with our proxy-server's draining answer (it got SIGTERM: nothing went to any agent) is
 * sent once more on a new connection, which the hub's Service may give to another replica, within
 * the same timeout. A connection that no proxy server takes (refused or reset before its TLS
 * handshake ended: a replica that just died, still listed by its Service) is made again, up to 5
 * connections 50-400 ms apart, within the same timeout. Nothing else is retried.
 */
export async function dialConnect(address: string, options: DialConnectOptions): Promise<net.Socket> {
  const limits = startDialLimits(address, options.timeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS, options.signal, options.clock);
  const reaching = (): Promise<net.Socket> =>
    connectAgain(() => dialConnectOnce(address, options, limits), {
      unreached: (err): err is DialError => err instanceof DialError && unreachedDials.has(err),
      stop: limits.signal,
      timers: limits.clock,
      timeLeftMs: () => remainingMs(limits),
      outOfTime: () => dialTimeoutError(address, limits.timeoutMs),
      exhausted: (err, note) => new DialError(`${err.message} ${note}`, err.reason, { cause: err.cause }),
    });
  try {
    return await reaching();
  } catch (err) {
    if (!serverDraining(err) || limits.signal?.aborted || remainingMs(limits) <= 0) throw err;
    return reaching();
  }
}

/** Dials that failed because no proxy server took their connection (see connect-again.ts). */
const unreachedDials = new WeakSet<DialError>();

/** Our proxy-server's answer to a CONNECT while it drains ({@link DialErrors.serverDraining}). */
function serverDraining(err: unknown): boolean {
  return err instanceof HttpConnectError && err.statusCode === 503 && err.body === DialErrors.serverDraining;
}

function dialConnectOnce(address: string, options: DialConnectOptions, limits: DialLimits): Promise<net.Socket> {
  if (!parseHostPort(address)) {
    return Promise.reject(new DialError(`invalid dial address "${address}": want host:port`, "unknown"));
  }
  const badTls = options.proxy.udsPath ? undefined : proxyTlsError(options.proxy, "dialConnect");
  if (badTls) return Promise.reject(badTls);
  if (limits.signal?.aborted) return Promise.reject(dialAbortError(address, limits.signal));
  return new Promise<net.Socket>((resolve, reject) => {
    const sessions = options.tlsSessions === false ? undefined : (options.tlsSessions ?? sharedTlsSessions);
    const socket = openProxySocket(options.proxy, sessions, options.tcpKeepaliveMs ?? DEFAULT_TCP_KEEPALIVE_MS);
    handshake(socket, address, options.proxy, limits, resolve, reject);
  });
}

function handshake(
  socket: net.Socket,
  address: string,
  proxy: ConnectProxyOptions,
  limits: DialLimits,
  resolve: (s: net.Socket) => void,
  reject: (e: Error) => void,
): void {
  let settled = false;
  let buffered: Buffer = Buffer.alloc(0);
  /** Set once a 200 came with more bytes that may be an old server's late error answer. */
  let okHead: ParsedHead | undefined;
  /** Set once an error head came; we read its body until close or Content-Length. */
  let errorHead: ParsedHead | undefined;
  /**
   * Set once the TLS handshake is done: only a connection that got that far and then ended can
   * have been refused for its certificate (a refused TCP connect is not; it was once reported so).
   */
  let secured = false;
  socket.once("secureConnect", () => void (secured = true));
  /** Set once the TCP connection is up: over plain TCP the CONNECT goes out then. */
  let connected = false;
  socket.once("connect", () => void (connected = true));

  const cleanup = (): void => {
    settled = true;
    limits.clock.clearTimeout(timer);
    limits.signal?.removeEventListener("abort", onAbort);
    socket.off("readable", onReadable);
    socket.off("end", onEnd);
    socket.off("error", onError);
    socket.off("close", onEnd);
  };
  const fail = (err: Error): void => {
    if (settled) return;
    cleanup();
    // The socket is never handed out: an error node emits after this (a TLS socket ended before
    // its handshake queues one) must not reach the process as an unhandled 'error'.
    socket.on("error", () => undefined);
    socket.destroy();
    reject(err);
  };
  const succeed = (rest: Buffer): void => {
    if (settled) return;
    // cleanup() removed our "readable" listener, which leaves the socket neither flowing nor
    // paused: exactly like a fresh net.Socket, it starts flowing when the caller listens.
    cleanup();
    if (rest.length > 0) socket.unshift(rest);
    resolve(socket);
  };
  const failWithHead = (head: ParsedHead, body: Buffer): void => {
    const text = body.toString("utf8").trim();
    // What a TLS port answers plain HTTP with (our server and Go's net/http alike).
    if (head.statusCode === 400 && /HTTP request to an HTTPS server/i.test(text)) {
      fail(
        new DialError(
          `wrong port or protocol: proxy ${describeProxy(proxy)} speaks TLS (it answered "${head.statusCode} ${head.statusText}: ${text}"): give proxy.ca, proxy.cert and proxy.key`,
          "unknown",
        ),
      );
      return;
    }
    fail(new HttpConnectError(head.statusCode, head.statusText, text));
  };
  const onData = (chunk: Buffer): void => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    try {
      step();
    } catch (err) {
      fail(err as Error);
    }
  };
  const step = (): void => {
    if (errorHead) {
      const length = Number(errorHead.headers.get("content-length") ?? NaN);
      if (Number.isInteger(length) && buffered.length >= length) failWithHead(errorHead, buffered.subarray(0, length));
      else if (buffered.length > MAX_RESPONSE_BYTES) failWithHead(errorHead, buffered.subarray(0, MAX_RESPONSE_BYTES));
      return;
    }
    if (okHead) {
      // An old Go server (<= v0.33.0) answers 200 at once and appends its real error answer.
      if (!mayBeStatusLine(buffered)) return succeed(buffered);
      const late = parseHead(buffered);
      if (!late) {
        if (buffered.length > MAX_RESPONSE_BYTES) succeed(buffered);
        return;
      }
      if (late.statusCode >= 500) {
        errorHead = late;
        buffered = late.rest;
        return step();
      }
      return succeed(buffered);
    }
    const head = parseHead(buffered);
    if (!head) {
      if (buffered.length > MAX_RESPONSE_BYTES) {
        fail(new DialError(`proxy ${describeProxy(proxy)} sent an oversized CONNECT response header`, "unknown"));
      }
      return;
    }
    if (head.statusCode === 200) {
      if (head.rest.length === 0) return succeed(head.rest);
      okHead = head;
      buffered = head.rest;
      return step();
    }
    errorHead = head;
    buffered = head.rest;
    step();
  };
  const onEnd = (): void => {
    if (errorHead) failWithHead(errorHead, buffered);
    else if (okHead) succeed(buffered);
    else fail(new DialError(closedUnanswered(socket, proxy, address, buffered.length > 0, secured), "tunnelclosed"));
  };
  const onError = (err: Error): void => {
    if (errorHead) failWithHead(errorHead, buffered);
    else {
      const why = describeConnectFailure(err, SDK_TLS_OPTIONS, describeProxy(proxy));
      const failure = new DialError(
        why === err.message && buffered.length === 0 && secured
          ? closedUnanswered(socket, proxy, address, false, secured) + ` [${err.message}]`
          : `CONNECT ${address} via ${describeProxy(proxy)} failed: ${why}`,
        "tunnelclosed",
        { cause: err },
      );
      // Before the TLS handshake ended (without TLS: before the connection was up) the CONNECT
      // had not gone out: no server took it.
      const sent = socket instanceof tls.TLSSocket ? secured : connected;
      if (!sent && unreachedFailure(err)) unreachedDials.add(failure);
      fail(failure);
    }
  };
  const onAbort = (): void => fail(dialAbortError(address, limits.signal));
  const timer = limits.clock.setTimeout(() => fail(dialTimeoutError(address, limits.timeoutMs)), remainingMs(limits));
  limits.signal?.addEventListener("abort", onAbort, { once: true });
  // Paused-mode reads, so nothing past the response head is consumed once we have settled.
  const onReadable = (): void => {
    for (
      let chunk = socket.read() as Buffer | null;
      chunk !== null;
      chunk = settled ? null : (socket.read() as Buffer | null)
    ) {
      onData(chunk);
    }
  };
  socket.on("readable", onReadable);
  socket.on("end", onEnd);
  socket.on("close", onEnd);
  socket.on("error", onError);
  socket.write(`CONNECT ${address} HTTP/1.1\r\nHost: ${address}\r\n\r\n`);
}
