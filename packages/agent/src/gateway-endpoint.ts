/**
 * The agent's gateway endpoint (docs/design/gateway.md): the in-process server behind the reserved
 * dial address `gateway.cluster-proxy.invalid`. Each tunnelled connection's byte stream is handed
 * to {@link GatewayEndpoint.accept}; the endpoint speaks mutual TLS over it (the agent certificate
 * serves, a client certificate from the gateway CA is required, TLS 1.2 at least) and HTTP/1.1
 * inside, forwarding requests as {@link GatewayProxy} does. The certificate, key and gateway CA are
 * polled by content (the tunnel package's CertReloader) and installed with `setSecureContext`:
 * new handshakes get them, established connections keep theirs.
 *
 * Bounds: a TLS handshake timeout, a header timeout, an idle keep-alive timeout and a cap on
 * concurrent connections (one over it is closed at once, logged).
 */
import * as https from "node:https";
import type { Duplex } from "node:stream";
import type * as tls from "node:tls";
import { CertReloader, type ReloadResult, type TlsFiles, type TlsMaterial } from "@cluster-proxy/tunnel";
import { DEFAULT_IMPERSONATION_PREFIX } from "@cluster-proxy/api";
import { type Logger } from "@cluster-proxy/kit";
import { GatewayProxy } from "./gateway-proxy.js";
import type { ClusterUpstreams } from "./gateway-upstreams.js";
import type { InProcessEndpoint } from "./server-tunnel.js";

/**
 * Default cap on concurrent endpoint connections: room for four gateway replicas' full pools
 * (`--max-connections-per-cluster` 256 each, a watch holding one for as long as it runs) and upgrades.
 */
export const GATEWAY_MAX_CONNECTIONS = 2048;

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
  /** Idle time between requests on a kept-alive connection (default 60 s). */
  keepAliveTimeoutMs?: number;
  /** Deadline for connecting to an upstream (default 10 s). */
  connectTimeoutMs?: number;
  /** The prefix impersonated names must carry (default {@link DEFAULT_IMPERSONATION_PREFIX}). */
  impersonationPrefix?: string;
}

/** The TLS settings besides the material (kept on every reload). */
const TLS_SETTINGS: tls.SecureContextOptions = { minVersion: "TLSv1.2" };

/** See the module comment. */
export class GatewayEndpoint implements InProcessEndpoint {
  private readonly server: https.Server;
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
    this.server = https.createServer(
      {
        ...TLS_SETTINGS,
        ...options.material,
        requestCert: true,
        rejectUnauthorized: true,
        ALPNProtocols: ["http/1.1"],
        handshakeTimeout: options.handshakeTimeoutMs ?? 10_000,
        headersTimeout,
        // A watch or an exec may run for hours: no deadline for a whole request.
        requestTimeout: 0,
        // The Host a caller sends is not where the request goes: the target headers say that.
        requireHostHeader: false,
        keepAliveTimeout: options.keepAliveTimeoutMs ?? 60_000,
        connectionsCheckingInterval: Math.min(headersTimeout, 30_000),
      },
      (req, res) => proxy.handleRequest(req, res),
    );
    this.server.on("upgrade", (req, socket: Duplex, head: Buffer) => proxy.handleUpgrade(req, socket, head));
    this.server.on("tlsClientError", (err) =>
      this.log.warn({ err: err.message }, "gateway endpoint: TLS handshake refused"),
    );
    this.server.on("clientError", (err, socket) => {
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

  /** Stop reloading, close every connection and the upstream pools. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.reloader.stop();
    for (const stream of this.connections) stream.destroy();
    this.connections.clear();
    this.server.closeAllConnections();
    this.options.upstreams.close();
  }
}
