/**
 * The agent's gateway endpoint: the in-process mutual-TLS server behind the reserved dial address,
 * `h2` for plain requests and one upgrade per `http/1.1` connection, with its bounds.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import type * as http from "node:http";
import * as http2 from "node:http2";
import type { Duplex } from "node:stream";
import type * as tls from "node:tls";
import { CertReloader, type ReloadResult, type TlsFiles, type TlsMaterial } from "@cluster-proxy/tunnel";
import { DEFAULT_IMPERSONATION_PREFIX } from "@cluster-proxy/api";
import { MULTIPLEXED_SESSION_RESETS, type Logger } from "@cluster-proxy/kit";
import { GatewayProxy } from "./gateway-proxy.js";
import type { ClusterUpstreams } from "./gateway-upstreams.js";
import type { InProcessEndpoint } from "../tunnel/server-tunnel.js";
import { errorMessage } from "@cluster-proxy/errors";

/**
 * Default cap on concurrent endpoint connections: HTTP/2 sessions (a few per gateway replica,
 * `--max-connections-per-cluster`) and one connection per running exec, attach or port-forward.
 */
export const GATEWAY_MAX_CONNECTIONS = 2048;
/** Default SETTINGS_MAX_CONCURRENT_STREAMS of a session (a watch holds a stream for as long as it runs). */
export const GATEWAY_MAX_CONCURRENT_STREAMS = 1000;
/** Default time a session without streams stays open. */
export const GATEWAY_IDLE_SESSION_MS = 120_000;

/** Options of a {@link GatewayEndpoint}. */
export interface GatewayEndpointOptions {
  /** The serving certificate and key (the agent's) and the gateway CA, as loaded at start. */
  material: { cert: Buffer; key: Buffer; ca: Buffer };
  /** The files behind {@link material}, polled every `reloadIntervalMs` (0: only on {@link GatewayEndpoint.reloadNow}). */
  files: TlsFiles;
  reloadIntervalMs: number;
  upstreams: ClusterUpstreams;
  logger: Logger;
  /** Concurrent connections (default {@link GATEWAY_MAX_CONNECTIONS}). */
  maxConnections?: number;
  /** TLS handshake deadline (default 10 s). */
  handshakeTimeoutMs?: number;
  /** Deadline for a request's headers (default 30 s). */
  headersTimeoutMs?: number;
  /** Time an HTTP/2 session without streams stays open (default {@link GATEWAY_IDLE_SESSION_MS}). */
  idleSessionTimeoutMs?: number;
  /** Concurrent streams of one HTTP/2 session (default {@link GATEWAY_MAX_CONCURRENT_STREAMS}). */
  maxConcurrentStreams?: number;
  /** Deadline for connecting to an upstream (default 10 s). */
  connectTimeoutMs?: number;
  /** The prefix impersonated names must carry (default {@link DEFAULT_IMPERSONATION_PREFIX}). */
  impersonationPrefix?: string;
}

/** A plain request over HTTP/1.1: refused (see the module comment), the connection closed. */
function refuseHttp1(res: http.ServerResponse): void {
  const body =
    "gateway endpoint: plain requests are served over HTTP/2 only (ALPN h2); HTTP/1.1 carries upgrades only: update the gateway\n";
  res.shouldKeepAlive = false;
  res.writeHead(505, {
    "Content-Type": "text/plain; charset=utf-8",
    "Content-Length": Buffer.byteLength(body),
    Connection: "close",
  });
  res.end(body);
  res.once("finish", () => res.socket?.destroySoon());
}

/** HTTP/1.1 connections that carried a request: a second one on the same connection is never served. */
const usedConnections = new WeakSet<object>();

/** Whether `socket` is new (and mark it used). */
function firstRequestOn(socket: object | null): boolean {
  if (!socket) return false;
  if (usedConnections.has(socket)) return false;
  usedConnections.add(socket);
  return true;
}

/** The TLS settings besides the material (kept on every reload). */
const TLS_SETTINGS: tls.SecureContextOptions = { minVersion: "TLSv1.2" };

/** See the module comment. */
export class GatewayEndpoint implements InProcessEndpoint {
  private readonly server: http2.Http2SecureServer;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly reloader: CertReloader;
  private readonly connections = new Set<Duplex>();
  private readonly maxConnections: number;
  private readonly log: Logger;
  private closed = false;

  constructor(private readonly options: GatewayEndpointOptions) {
    this.log = options.logger.child({ component: "gateway-endpoint" });
    this.maxConnections = options.maxConnections ?? GATEWAY_MAX_CONNECTIONS;
    const headersTimeout = options.headersTimeoutMs ?? 30_000;
    const proxy = new GatewayProxy({
      resolve: (target) => options.upstreams.resolve(target),
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      impersonationPrefix: options.impersonationPrefix ?? DEFAULT_IMPERSONATION_PREFIX,
      logger: this.log,
    });
    this.server = http2.createSecureServer(
      {
        ...TLS_SETTINGS,
        ...options.material,
        requestCert: true,
        rejectUnauthorized: true,
        // ALPN h2 and http/1.1; a client without ALPN gets HTTP/1.1 (upgrades only).
        allowHTTP1: true,
        handshakeTimeout: options.handshakeTimeoutMs ?? 10_000,
        settings: { maxConcurrentStreams: options.maxConcurrentStreams ?? GATEWAY_MAX_CONCURRENT_STREAMS },
        // A session is the gateway's (its certificate), carrying every user of this cluster: one
        // user's cancelled requests must not close it; the gateway bounds each user itself.
        ...MULTIPLEXED_SESSION_RESETS,
      },
      (req: http2.Http2ServerRequest | http.IncomingMessage, res: http2.Http2ServerResponse | http.ServerResponse) => {
        try {
          if ("stream" in req && "stream" in res) proxy.handleRequest(req, res);
          else if (!("stream" in res)) {
            this.log.warn(
              { method: req.method, error: "a plain request over HTTP/1.1 (505)" },
              "gateway request refused",
            );
            if (firstRequestOn(res.socket)) refuseHttp1(res);
            else res.destroy();
          }
        } catch (err) {
          // The last resort: only this request is cut.
          this.log.error({ err: errorMessage(err) }, "gateway endpoint: request handling failed");
          if ("stream" in res) res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
          else res.destroy();
        }
      },
    );
    // With allowHTTP1 the HTTP/1.1 side is http.Server's machinery, which honours these (a watch
    // or an exec may run for hours: no deadline for a whole request); @types/node does not declare
    // them on Http2SecureServer.
    Object.assign(this.server, {
      headersTimeout,
      requestTimeout: 0,
      requireHostHeader: false,
      connectionsCheckingInterval: Math.min(headersTimeout, 30_000),
    });
    this.server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      try {
        if (firstRequestOn(socket)) proxy.handleUpgrade(req, socket, head);
        else socket.destroy();
      } catch (err) {
        this.log.error({ err: errorMessage(err) }, "gateway endpoint: upgrade handling failed");
        socket.destroy();
      }
    });
    const idleMs = options.idleSessionTimeoutMs ?? GATEWAY_IDLE_SESSION_MS;
    this.server.on("session", (session: http2.ServerHttp2Session) => this.trackSession(session, idleMs));
    this.server.on("sessionError", (err: Error) =>
      this.log.debug({ err: err.message }, "gateway endpoint: session error"),
    );
    this.server.on("tlsClientError", (err: Error) =>
      this.log.warn({ err: err.message }, "gateway endpoint: TLS handshake refused"),
    );
    this.server.on("clientError", (err: Error, socket: Duplex) => {
      this.log.warn({ err: err.message }, "gateway endpoint: bad HTTP request");
      socket.destroy();
    });
    this.reloader = new CertReloader({
      what: "gateway endpoint",
      files: options.files,
      intervalMs: options.reloadIntervalMs,
      initial: options.material,
      apply: (material: TlsMaterial) => this.server.setSecureContext({ ...TLS_SETTINGS, ...material }),
      logger: this.log,
    });
    this.reloader.start();
  }

  /** Close `session` with GOAWAY once it has had no stream for `idleMs`. */
  private trackSession(session: http2.ServerHttp2Session, idleMs: number): void {
    this.sessions.add(session);
    let streams = 0;
    let timer: NodeJS.Timeout | undefined;
    const idle = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => session.close(), idleMs);
      timer.unref();
    };
    idle();
    session.on("stream", (stream: http2.ServerHttp2Stream) => {
      streams++;
      clearTimeout(timer);
      stream.once("close", () => {
        if (--streams === 0 && !session.closed) idle();
      });
    });
    session.on("error", () => undefined);
    session.once("close", () => {
      clearTimeout(timer);
      this.sessions.delete(session);
    });
  }

  /** Connections being served now. */
  get connectionCount(): number {
    return this.connections.size;
  }

  /** Serve one connection's byte stream (mutual TLS, then HTTP/1.1). */
  accept(stream: Duplex): void {
    if (this.closed) {
      stream.destroy();
      return;
    }
    if (this.connections.size >= this.maxConnections) {
      this.log.warn({ max: this.maxConnections }, "gateway endpoint: too many connections, closing a new one");
      stream.destroy();
      return;
    }
    this.connections.add(stream);
    stream.once("close", () => this.connections.delete(stream));
    this.server.emit("connection", stream);
  }

  /** Re-read the certificate, key and gateway CA now (tests; the poll does it every interval). */
  reloadNow(): Promise<ReloadResult> {
    return this.reloader.check();
  }

  /**
   * Draining (the agent's first SIGTERM, before its grace period): GOAWAY on every HTTP/2 session,
   * naming the last stream it runs. Those streams finish; the gateway opens its next streams on a
   * new session, through a new tunnel dial, which the proxy-servers give to another agent of the
   * cluster when there is one (this one sent DRAIN). A stream the gateway sent before it read the
   * GOAWAY is refused unprocessed, and the gateway retries it (docs/design/gateway.md, "Retry").
   * Sessions opened later (the cluster's only agent) are served as usual until close.
   */
  drain(): void {
    if (this.closed) return;
    for (const session of this.sessions) if (!session.closed) session.close();
    this.log.info({ sessions: this.sessions.size }, "gateway endpoint draining: GOAWAY sent on every session");
  }

  /** Stop reloading, close every connection and the upstream pools. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.reloader.stop();
    for (const session of this.sessions) session.destroy();
    for (const stream of this.connections) stream.destroy();
    this.connections.clear();
    this.options.upstreams.close();
  }
}
