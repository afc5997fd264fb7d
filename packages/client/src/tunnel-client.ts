/**
 * Dialling through the hub's gRPC front door: a reusable {@link TunnelClient} (one HTTP/2
 * session, one Proxy stream per dial) and the single-use {@link dial}.
 */
import { errorMessage, ConfigError } from "@cluster-proxy/errors";
import type * as http2 from "node:http2";
import { PROXY_METHOD, parseHostPort } from "@cluster-proxy/protocol";
import {
  ConnectError,
  DialError,
  connectSession,
  sharedTlsSessions,
  keepSessionAlive,
  openCall,
  type ClientCall,
  type ConnectTarget,
} from "@cluster-proxy/tunnel";
import { keepAliveClock, silentLogger, type Clock, type Logger } from "@cluster-proxy/kit";
import { connectAgain } from "./connect-again.js";
import { remainingMs, startDialLimits, withinDialLimits } from "./dial-limits.js";
import { dialOnCall, isServerGoingAway } from "./grpc-dial.js";
import { newDialRandom } from "./proxy-call.js";
import type { TunnelSocket } from "./tunnel-socket.js";
import {
  DEFAULT_DIAL_TIMEOUT_MS,
  DEFAULT_TCP_KEEPALIVE_MS,
  describeProxy,
  proxyTlsError,
  tlsOptionsOf,
  type DialOptions,
  type TunnelClientOptions,
} from "./options.js";

/** Marks the client behind {@link dial}: it closes its session when its one tunnel is done. */
const SINGLE_USE = Symbol("singleUse");

interface InternalOptions extends TunnelClientOptions {
  [SINGLE_USE]?: true;
}

/**
 * A client of the hub's gRPC front door (`/ProxyService/Proxy`) that keeps ONE HTTP/2 session
 * (mutual TLS over TCP, or plain over a Unix socket) and opens one Proxy stream per dial, so
 * dials after the first cost no TCP/TLS handshake. The session is opened on the first dial and
 * opened again when it was lost. Idle, it does not keep the process alive.
 *
 * ```ts
 * const client = new TunnelClient({ proxy: { host: "hub.example", port: 8090, ca, cert, key } });
 * const socket = await client.dial("east:443");
 * // ... use socket like a net.Socket ...
 * await client.close();
 * ```
 */
/** How long `close()` lets the session end gracefully before destroying it. */
const CLOSE_GRACE_MS = 2000;

export class TunnelClient {
  private readonly options: TunnelClientOptions;
  private readonly logger: Logger;
  private readonly clock: Clock;
  private readonly singleUse: boolean;
  private session: http2.ClientHttp2Session | undefined;
  private connecting: Promise<http2.ClientHttp2Session> | undefined;
  private closed = false;
  /** Dials in progress plus open tunnels (each holds its Proxy call). */
  private active = 0;
  /** Of those, the ones that keep the process alive. */
  private referenced = 0;
  private closedPromise: Promise<void> | undefined;
  /** Aborted by `close()`: ends a pause between connection attempts. */
  private readonly closing = new AbortController();

  constructor(options: TunnelClientOptions) {
    const proxy = options.proxy;
    if (!proxy.udsPath && (proxy.port === undefined || !Number.isInteger(proxy.port) || proxy.port <= 0)) {
      throw new ConfigError("TunnelClient: proxy.port (or proxy.udsPath) is required");
    }
    const badTls = proxy.udsPath ? undefined : proxyTlsError(proxy, "TunnelClient");
    if (badTls) throw badTls;
    this.options = options;
    this.logger = options.logger ?? silentLogger;
    this.clock = options.clock ?? keepAliveClock;
    this.singleUse = (options as InternalOptions)[SINGLE_USE] === true;
  }

  /** Number of dials in progress plus tunnels still open on this client. */
  get activeTunnels(): number {
    return this.active;
  }

  /**
   * Open a TCP connection to `address` (`host:port`, e.g. `east:443` or `[fd00::1]:443`) inside
   * a managed cluster. Resolves once the agent has connected it.
   *
   * Rejects with a `DialError` whose `reason` says why: `endpoint` (the hub or agent refused:
   * the message is the server's text, e.g. `No agent available` or `dial tcp ...: connection
   * refused`), `timeout`, `context` (aborted), `dialclosed`, `tunnelclosed`; or with a
   * `ConnectError` (code `CP_ERR_CONNECT`) when the proxy server cannot be reached.
   *
   * A dial refused because the proxy-server is going away (it drains: GOAWAY, REFUSED_STREAM, or
   * its draining answer, all before the dial reached an agent) is sent once more on a new
   * connection, which the hub's Service may give to another replica, within the same timeout. A
   * connection that no proxy server takes (refused or reset before its TLS handshake ended: a
   * replica that just died, still listed by its Service) is made again, up to 5 connections
   * 50-400 ms apart, within the same timeout. Nothing else is retried: once the server took the
   * dial, bytes may have gone out.
   */
  async dial(address: string, options: DialOptions = {}): Promise<TunnelSocket> {
    if (this.closed) throw new DialError(`cannot dial ${address}: the tunnel client is closed`, "tunnelclosed");
    if (!parseHostPort(address)) {
      throw new DialError(`invalid dial address "${address}": want host:port`, "unknown");
    }
    const limits = startDialLimits(
      address,
      options.timeoutMs ?? this.options.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS,
      options.signal,
      this.clock,
    );
    // Held across the attempts, so a single-use client is not closed between them.
    this.acquire();
    try {
      for (let attempt = 0; ; attempt++) {
        this.acquire();
        let released = false;
        const release = (): void => {
          if (released) return;
          released = true;
          this.releaseOne(true);
        };
        let call: ClientCall;
        try {
          call = await this.openProxyCall(limits);
        } catch (err) {
          release();
          throw err;
        }
        try {
          return await dialOnCall({
            call,
            address,
            random: newDialRandom(),
            timeoutMs: remainingMs(limits),
            signal: options.signal,
            logger: this.logger,
            timers: this.clock,
            release,
            setRef: (ref) => this.setRef(ref),
          });
        } catch (err) {
          if (attempt > 0 || !isServerGoingAway(err) || this.closed || remainingMs(limits) <= 0) throw err;
          // The next attempt opens a new session (the old one may still carry tunnels: the
          // server closes it once they are done).
          if (this.session === call.http2Stream.session) this.session = undefined;
          this.logger.debug(
            { address, proxy: describeProxy(this.options.proxy), err: errorMessage(err) },
            "proxy server going away: dialling again on a new connection",
          );
        }
      }
    } finally {
      this.releaseOne(true);
    }
  }

  /**
   * Close the session. Tunnels still open are cut (their sockets are destroyed with a
   * `TunnelClosedError`): `end()` them first for an orderly close. Further dials fail.
   */
  close(): Promise<void> {
    if (this.closedPromise) return this.closedPromise;
    this.closed = true;
    // Only a connect under way listens (aborting builds a DOMException: not on every single-use dial).
    if (this.connecting) this.closing.abort();
    this.closedPromise = (async () => {
      const pending = this.connecting;
      if (pending)
        await pending.then(
          () => undefined,
          () => undefined,
        );
      const session = this.session;
      this.session = undefined;
      if (!session || session.destroyed) return;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          this.clock.clearTimeout(limit);
          resolve();
        };
        // A graceful close waits for the peer; one that stopped answering must not hold close()
        // (and the caller's shutdown) forever. Nor may its "close" event: node's HTTP/2 emits it
        // only once the native session has flushed, which a peer that stopped reading prevents,
        // so after the grace period destroy() is the end whether or not "close" follows.
        const limit = this.clock.setTimeout(() => {
          session.destroy();
          done();
        }, CLOSE_GRACE_MS);
        session.once("close", done);
        if (this.active > 0) {
          session.destroy();
          done();
        } else session.close();
      });
    })();
    return this.closedPromise;
  }

  private async openProxyCall(limits: ReturnType<typeof startDialLimits>): Promise<ClientCall> {
    for (let attempt = 0; ; attempt++) {
      const session = await withinDialLimits(this.getSession(), limits, () => undefined);
      try {
        return openCall(session, PROXY_METHOD);
      } catch (err) {
        // The session went away between the check and the request (GOAWAY, close): retry once.
        if (this.session === session) this.session = undefined;
        if (attempt >= 1) {
          throw new DialError(
            `cannot open a tunnel stream to ${describeProxy(this.options.proxy)}: ${errorMessage(err)}`,
            "tunnelclosed",
            { cause: err },
          );
        }
      }
    }
  }

  private getSession(): Promise<http2.ClientHttp2Session> {
    const current = this.session;
    if (current && !current.closed && !current.destroyed) return Promise.resolve(current);
    this.session = undefined;
    this.connecting ??= this.connect().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private async connect(): Promise<http2.ClientHttp2Session> {
    const proxy = this.options.proxy;
    const target: ConnectTarget = proxy.udsPath
      ? { udsPath: proxy.udsPath }
      : { host: proxy.host ?? "127.0.0.1", port: proxy.port, tls: tlsOptionsOf(proxy) };
    const sessions = this.options.tlsSessions;
    if (sessions !== false) target.sessions = sessions ?? sharedTlsSessions;
    target.timeoutMs = this.options.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
    target.tcpKeepaliveMs = this.options.tcpKeepaliveMs ?? DEFAULT_TCP_KEEPALIVE_MS;
    const session = await this.connectReaching(target);
    if (this.closed) {
      session.destroy();
      throw new DialError("the tunnel client is closed", "tunnelclosed");
    }
    this.logger.debug({ proxy: describeProxy(proxy) }, "tunnel session connected");
    this.session = session;
    const forget = (): void => {
      if (this.session === session) this.session = undefined;
    };
    session.once("close", forget);
    session.once("goaway", forget);
    const keepalive = this.options.keepaliveMs ?? 0;
    if (keepalive > 0) {
      keepSessionAlive(session, keepalive, Math.max(keepalive, 20_000), (reason) => {
        this.logger.warn({ proxy: describeProxy(proxy), reason }, "tunnel session lost");
      });
    }
    this.applyRef();
    return session;
  }

  /**
   * `connectSession(target)`, connected again while no proxy server takes the connection
   * (connect-again.ts), all within one `target.timeoutMs`: the session is shared by every dial
   * waiting for it, and goes on after one gives up, so its attempts together take no longer than
   * one connection may.
   */
  private connectReaching(target: ConnectTarget): Promise<http2.ClientHttp2Session> {
    const deadline = this.clock.now() + (target.timeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS);
    const timeLeftMs = (): number => deadline - this.clock.now();
    return connectAgain(() => connectSession({ ...target, timeoutMs: Math.max(1, timeLeftMs()) }), {
      unreached: (err): err is ConnectError => err instanceof ConnectError && err.unreached,
      stop: this.closing.signal,
      timers: this.clock,
      timeLeftMs,
      onRetry: (attempt, pauseMs, err) =>
        this.logger.debug(
          { proxy: describeProxy(this.options.proxy), attempt, pauseMs, err: errorMessage(err) },
          "no proxy server took the connection: connecting again",
        ),
      exhausted: (err, note) => new ConnectError(`${err.message} ${note}`, { cause: err.cause, unreached: true }),
    });
  }

  private acquire(): void {
    this.active++;
    this.referenced++;
    this.applyRef();
  }

  private releaseOne(referenced: boolean): void {
    this.active--;
    if (referenced) this.referenced--;
    this.applyRef();
    if (this.singleUse && this.active === 0) void this.close();
  }

  private setRef(ref: boolean): void {
    this.referenced += ref ? 1 : -1;
    this.applyRef();
  }

  private applyRef(): void {
    const session = this.session;
    if (!session || session.destroyed) return;
    if (this.referenced > 0) session.ref();
    else session.unref();
  }
}

/**
 * Open ONE tunnelled TCP connection to `address` through the hub, the way Go's
 * `CreateSingleUseGrpcTunnel` does: a new HTTP/2 session, one Proxy stream, one dial; the
 * session is closed when the connection is. Prefer a {@link TunnelClient} for many dials.
 *
 * ```ts
 * const socket = await dial("east:443", { proxy: { host: "hub", port: 8090, ca, cert, key } });
 * ```
 */
export function dial(address: string, options: TunnelClientOptions & DialOptions): Promise<TunnelSocket> {
  const client = new TunnelClient({ ...options, [SINGLE_USE]: true } as InternalOptions);
  return client.dial(address, { signal: options.signal, timeoutMs: options.timeoutMs });
}
