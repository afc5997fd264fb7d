/**
 * The gateway component: the HTTPS port (HTTP/1.1 and HTTP/2, upgrades over HTTP/1.1), its
 * serving certificate and the gateway identity reloaded when their files change (polled by
 * content: Secret volumes swap symlinks), the health port (/healthz, /readyz,
 * /metrics), the ConfigMap watch of the exposed Services, the fleet view below `/-/fleet/`
 * (docs/design/fleet-view.md: answered before cluster routing, fed by `fleet/fleet-source.ts`, its
 * viewers authorized by `fleet/fleet-viewers.ts`), and a graceful shutdown.
 */
import { once } from "node:events";
import { readFile } from "node:fs/promises";
import type * as http from "node:http";
import * as http2 from "node:http2";
import type * as net from "node:net";
import type { X509Certificate } from "node:crypto";
import type { Duplex } from "node:stream";
import type * as tls from "node:tls";
import { TunnelClient } from "@cluster-proxy/client";
import {
  FleetHttp,
  FleetModel,
  type FleetLimits,
  type FleetRequest,
  type FleetResponse,
  type UiAssets,
} from "@cluster-proxy/fleet";
import { CertReloader, loadTlsFiles, type ReloadResult, type TlsFiles } from "@cluster-proxy/tunnel";
import { ConfigError, type GatewayOptions } from "@cluster-proxy/api";
import {
  InFlight,
  Lifecycle,
  guardPlainHttp,
  MULTIPLEXED_SESSION_RESETS,
  realClock,
  silentLogger,
  type Clock,
  type Component,
  type Logger,
} from "@cluster-proxy/kit";
import { closeEndpointServer, createEndpointServer, listenEndpointServer } from "@cluster-proxy/kit/endpoints";
import { healthPortEndpoints } from "@cluster-proxy/kit/process";
import { admit, type AdmissionDeps, type RequestHead } from "./admission.js";
import { discoveryDocument, fromAggregatedUrl, isOpenApiPath } from "./aggregated-api.js";
import { auditSinkOf, type AuditSink } from "./audit-log.js";
import { Authenticator } from "./authentication.js";
import { Authorizer } from "./authorization.js";
import { ClusterDirectory } from "./cluster-directory.js";
import { bodyFraming, checkUpgradeFraming } from "./body-framing.js";
import { guardPort } from "./client-connections.js";
import { ClusterPool, type Dialer, type EndpointTls } from "./cluster-pool.js";
import { probeEndpoint } from "./endpoint-probe.js";
import { ExposedServices } from "./exposed-services.js";
import { FleetSource } from "./fleet/fleet-source.js";
import { FleetViewers } from "./fleet/fleet-viewers.js";
import { EXTENSION_AUTH_CONFIGMAP, FrontProxyTrust } from "./front-proxy.js";
import { GatewayError, asGatewayError } from "./gateway-error.js";
import type { HubApi, UserInfo } from "./hub-api.js";
import { GatewayMetrics } from "./metrics.js";
import { OidcAuthenticator } from "./oidc.js";
import {
  relayError,
  relayRequest,
  relayUpgrade,
  writeRawError,
  type CallerExchange,
  type RetryReason,
} from "./relay.js";
import { RequestRecord } from "./request-record.js";
import { sandboxed } from "./response-policy.js";
import { MOUNTED_TOKEN_FILE, TokenAudiences, tokenFileAudiences } from "./token-audiences.js";
import { checkUpgradeOrigin } from "./upgrade-origin.js";
import { UserCaps, callerKey, closeSignal, kindOf, releaseOn, writeRawTooMany } from "./user-caps.js";
import { errorMessage } from "@cluster-proxy/errors";

/** How often the serving certificate files are checked for changes. */
export const SERVING_CERT_POLL_MS = 5_000;
/** How long a graceful shutdown waits for in-flight requests before closing everything. */
export const SHUTDOWN_GRACE_MS = 25_000;

/** What the gateway is built with besides its options. */
export interface GatewayDeps {
  hub: HubApi;
  /** How to reach a cluster's endpoint (default: a TunnelClient to --proxy-server-host/port). */
  dialer?: Dialer;
  logger?: Logger;
  /** Where audit records go (default: --audit-log). */
  audit?: AuditSink;
  /** Bind address of both ports (default: all). */
  bindAddress?: string;
  /**
   * The clock of the caches, OIDC, the front proxy's certificate, the hub reviews' deadlines, the
   * per-user queues, the connections' idle times, the fleet view, the drain's --shutdown-delay and
   * the close's grace (tests; default the kit's `realClock`; its `now()` is read as Unix ms where
   * certificates and tokens are checked).
   */
  clock?: Clock;
  /** Bounds on callers (default {@link DEFAULT_CALLER_LIMITS}; tests shorten them). */
  limits?: Partial<CallerLimits>;
  /** The fleet view's settings (tests; defaults otherwise). */
  fleet?: FleetSettings;
  /** The gateway's own mounted ServiceAccount token, whose `aud` names the hub apiserver's audiences (default {@link MOUNTED_TOKEN_FILE}). */
  serviceAccountTokenFile?: string;
}

/** Settings of the gateway's fleet view. */
export interface FleetSettings {
  /** Interval of each cluster's endpoint probe (default 20 s). */
  probeIntervalMs?: number;
  /** Endpoint probes at once (default 8). */
  probeConcurrency?: number;
  /** Timeout of one endpoint probe (default {@link FLEET_PROBE_TIMEOUT_MS}). */
  probeTimeoutMs?: number;
  /** The page's files (default: the built page). */
  assets?: UiAssets;
  limits?: Partial<FleetLimits>;
}

/** How long one endpoint probe of the fleet view may take. */
export const FLEET_PROBE_TIMEOUT_MS = 10_000;

/** What one caller may hold at the gateway's port, so stalled or flooding clients cannot exhaust it. */
export interface CallerLimits {
  /** TLS connections open at once; further ones are closed on arrival until some end. */
  maxConnections: number;
  /**
   * TLS connections one client (source address; IPv6 by /64) may hold at once; further ones are
   * closed on arrival (default --max-connections-per-client).
   */
  maxConnectionsPerClient: number;
  /**
   * An HTTP/2 connection without an open stream for this long is closed, and so is an HTTP/1.1
   * connection that has begun no request (default --connection-idle-timeout; one idle after a
   * response is closed after Node's keepAliveTimeout, 5 s).
   */
  idleTimeoutMs: number;
  /** Streams one HTTP/2 connection may have open at once (default --http2-max-streams-per-connection). */
  maxConcurrentStreams: number;
  /**
   * Streams an HTTP/2 client may reset before their answer began, at once (the allowance refills
   * at a tenth of this per second); beyond, its connection is cut (rapid reset).
   */
  maxEarlyResets: number;
  /** A TLS handshake not finished within this is cut. */
  handshakeTimeoutMs: number;
  /** An HTTP/1.1 request whose headers have not all arrived within this is answered 408 and cut. */
  headersTimeoutMs: number;
}

/** The limits the gateway runs with, besides those its flags set. */
export const DEFAULT_CALLER_LIMITS: Omit<
  CallerLimits,
  "maxConnectionsPerClient" | "idleTimeoutMs" | "maxConcurrentStreams"
> = {
  maxConnections: 8192,
  handshakeTimeoutMs: 10_000,
  headersTimeoutMs: 30_000,
  maxEarlyResets: 200,
};

/** The limits of `o`: {@link DEFAULT_CALLER_LIMITS} and the flags', then `overrides` (tests). */
export function callerLimitsOf(o: GatewayOptions, overrides: Partial<CallerLimits> = {}): CallerLimits {
  return {
    ...DEFAULT_CALLER_LIMITS,
    maxConnectionsPerClient: o.maxConnectionsPerClient,
    idleTimeoutMs: o.connectionIdleTimeout,
    maxConcurrentStreams: o.http2MaxStreamsPerConnection,
    ...overrides,
  };
}

type AnyRequest = http.IncomingMessage | http2.Http2ServerRequest;
type AnyResponse = http.ServerResponse | http2.Http2ServerResponse;

/** The TLS socket a request came over. */
function tlsSocketOf(req: AnyRequest): tls.TLSSocket | undefined {
  const socket = "stream" in req ? req.stream.session?.socket : req.socket;
  return socket && isTlsSocket(socket) ? socket : undefined;
}

/**
 * Whether `socket` is a TLS socket. An HTTP/2 session's socket is a Proxy whose `in` looks at the
 * session, not the socket (HTTP/2 callers' client certificates went unseen): ask its `get`.
 */
function isTlsSocket(socket: net.Socket | tls.TLSSocket): socket is tls.TLSSocket {
  return typeof Reflect.get(socket, "getPeerX509Certificate") === "function";
}

/**
 * The caller's client certificate when the handshake verified it against --client-ca-file
 * (`clientCa` set). Without that flag the handshake still asks for a certificate (for the hub's
 * front proxy) but has no CA of its own, so Node verifies against its default roots: such a
 * certificate is no credential.
 */
function clientCertificateOf(socket: tls.TLSSocket | undefined, clientCa: boolean): X509Certificate | undefined {
  return clientCa && socket?.authorized ? socket.getPeerX509Certificate() : undefined;
}

function headOf(req: AnyRequest, upgrade: boolean, frontProxy: FrontProxyTrust, clientCa: boolean): RequestHead {
  const socket = tlsSocketOf(req);
  const cert = clientCertificateOf(socket, clientCa);
  const source = req.socket.remoteAddress;
  const stated = frontProxy.identify(socket, req.rawHeaders);
  return {
    method: req.method ?? "GET",
    url: req.url ?? "/",
    headers: req.headers,
    upgrade,
    ...(source !== undefined ? { source } : {}),
    ...(cert ? { clientCertificate: cert } : {}),
    ...(stated !== undefined ? { frontProxy: stated } : {}),
  };
}

/** Run `fn` (closing a caller), ignoring what it throws. */
function destroyQuietly(fn: () => void): void {
  try {
    fn();
  } catch {
    // Already gone.
  }
}

/** The caller's side of a plain request; the relay guards each call (any may throw). */
function exchangeOf(req: AnyRequest, res: AnyResponse): CallerExchange {
  /** An HTTP/1.1 head written but not yet on the wire (it waits for the first body bytes). */
  let headPending = false;
  const flushHead = (): void => {
    if (!headPending || "stream" in res) return;
    headPending = false;
    if (!res.writableEnded && !res.destroyed) destroyQuietly(() => res.flushHeaders());
  };
  return {
    body: req,
    // Over HTTP/1.1 the head goes out with the first body bytes (one write, one TLS record), or on
    // its own once this turn of the event loop is over without any: a watch with no events yet
    // must not look hung. (HTTP/2 sends what a turn wrote in one go anyway.)
    writeHead: (status, headers) => {
      res.writeHead(status, headers);
      if ("stream" in res) return;
      headPending = true;
      setImmediate(flushHead);
    },
    write: (chunk) => {
      headPending = false;
      return "stream" in res ? res.write(chunk) : res.write(chunk);
    },
    end: () => {
      headPending = false;
      res.end();
    },
    destroy: () => {
      if ("stream" in res) {
        res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
        return;
      }
      // An answer cut in the turn its head arrived: the caller still gets that head, then the
      // connection ends (its body cut short), as when the head had gone out at once.
      const socket = res.socket;
      if (headPending && socket && !res.destroyed) {
        flushHead();
        socket.destroySoon();
        return;
      }
      res.destroy();
    },
    onDrain: (fn) => void res.once("drain", fn),
    onClose: (fn) => void res.once("close", fn),
    headersSent: () => res.headersSent,
    writableEnded: () => res.writableEnded,
  };
}

/** The fleet view's side of a response (HTTP/1.1 or HTTP/2); `out` counts the body's bytes. */
function fleetResponseOf(res: AnyResponse, out: (n: number) => void): FleetResponse {
  return {
    writeHead: (status, headers) => {
      if ("stream" in res) res.writeHead(status, headers);
      else res.writeHead(status, headers);
    },
    write: (chunk) => {
      out(Buffer.byteLength(chunk));
      return "stream" in res ? res.write(chunk) : res.write(chunk);
    },
    end: (body) => {
      if (body === undefined) res.end();
      else {
        out(Buffer.byteLength(body));
        if ("stream" in res) res.end(body);
        else res.end(body);
      }
    },
    destroy: () => ("stream" in res ? res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR) : res.destroy()),
    once: (event, listener) => {
      if ("stream" in res) res.once(event, listener);
      else res.once(event, listener);
    },
  };
}

/** How long a connection gets at shutdown to flush what was written to it. */
const SOCKET_END_MS = 1000;

/** Ends `s` after its pending writes; destroys it if it has not closed within `ms`. */
function endGracefully(s: Duplex, ms: number): Promise<void> {
  if (s.destroyed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => s.destroy(), ms);
    s.once("close", () => {
      clearTimeout(timer);
      resolve();
    });
    s.end();
  });
}

/** What the gateway knows of one fleet-view request beyond the request itself. */
interface FleetRequestContext {
  /** The caller's verified client certificate (for the viewer's authentication). */
  certificate?: X509Certificate;
  /** The caller's address (for the TokenReview rate limit). */
  source?: string;
  /** What the hub's front proxy states, when the request came through it (the aggregated path). */
  frontProxy?: UserInfo | "no-user";
  /** Its audit record, and the refusal its authentication gave, if any. */
  rec: RequestRecord;
  refusal?: string;
}

/** The gateway's identity towards agents: --identity-cert/--identity-key and --agent-ca, read at start and on reload. */
function gatewayIdentityFiles(o: Pick<GatewayOptions, "identityCert" | "identityKey" | "agentCa">): Required<TlsFiles> {
  return {
    cert: { flag: "--identity-cert", path: o.identityCert },
    key: { flag: "--identity-key", path: o.identityKey },
    ca: { flag: "--agent-ca", path: o.agentCa },
  };
}

/** Where a pod's ServiceAccount mount says which namespace it runs in. */
const MOUNTED_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/** Open the audit sink --audit-log names (a file is opened for appending): a ConfigError naming the flag when it cannot be. */
function openAuditSink(o: Pick<GatewayOptions, "auditLog" | "auditLogMaxSize" | "auditLogMaxFiles">): AuditSink {
  try {
    return auditSinkOf(o.auditLog, o.auditLogMaxSize, o.auditLogMaxFiles);
  } catch (err) {
    throw new ConfigError(`--audit-log: ${o.auditLog}: cannot open: ${errorMessage(err)}`, { cause: err });
  }
}

/** What {@link Gateway.start} resolves with: the ports it listens on (the "started" log line). */
export interface GatewayPorts {
  /** --port (the gateway's HTTPS port). */
  port: number;
  /** --health-port (/healthz, /readyz, /metrics). */
  healthPort: number;
}

/**
 * What the gateway builds at start from the files its options name (the TLS files, the mounted
 * token, the audit log): nothing of it exists before {@link Gateway.start}.
 */
interface Serving {
  audit: AuditSink;
  admission: AdmissionDeps;
  pool: ClusterPool;
  /** The client of the proxy-servers (none with an injected dialer). */
  tunnel: TunnelClient | undefined;
  /** The fleet view and its hub source. */
  fleet: FleetHttp;
  fleetSource: FleetSource;
  /** Follows --identity-cert, --identity-key and --agent-ca. */
  identityReloader: CertReloader;
}

/**
 * See the module comment. A kit `Component` (docs/design/architecture.md#one-component-shape): it
 * takes its options parsed (`parseGatewayOptions`), its constructor reads no file and opens
 * nothing; {@link start} reads the files (each failure a `CP_ERR_TLS_FILE` or `ConfigError` naming
 * its flag) and opens the ports.
 */
export class Gateway implements Component<GatewayPorts> {
  readonly metrics: GatewayMetrics;
  readonly services = new ExposedServices();
  /** Each caller's share of each cluster (user-caps.ts). */
  readonly caps: UserCaps;
  /** What the fleet view shows (docs/design/fleet-view.md). */
  readonly fleetModel: FleetModel;
  /** What the fleet view's authentication and audit need of each of its requests. */
  private readonly fleetRequests = new WeakMap<FleetRequest, FleetRequestContext>();
  private readonly logger: Logger;
  /** The drain's --shutdown-delay, the close's grace and the per-user queues' deadlines run on it. */
  private readonly clock: Clock;
  private readonly clusters: ClusterDirectory;
  /** Start, drain and close, each once. */
  private readonly life = new Lifecycle<GatewayPorts>("gateway");
  /** Plain requests in flight: {@link close} waits for them, up to its grace. */
  private readonly inFlight: InFlight;
  /** What {@link start} built from the files (undefined before, and when reading them failed). */
  private serving: Serving | undefined;
  private server: http2.Http2SecureServer | undefined;
  /** What listens on --port: the plain-HTTP guard in front of `server`. */
  private listener: net.Server | undefined;
  private health: http.Server | undefined;
  private reloader: CertReloader | undefined;
  private stopWatch: (() => void) | undefined;
  private stopFrontProxyWatch: (() => void) | undefined;
  /** The hub apiserver as a front proxy (the aggregated path), when --front-proxy-authentication. */
  private readonly frontProxy: FrontProxyTrust;
  /** Both ports listen (ready unless draining or closing). */
  private ready = false;
  /** The open HTTP/2 sessions of callers (GOAWAY on drain). */
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly sockets = new Set<Duplex>();
  private readonly upgrades = new Set<Duplex>();

  /** Reads no file and opens nothing ({@link start} does); `options` as `parseGatewayOptions` gives them. */
  constructor(
    private readonly options: GatewayOptions,
    private readonly deps: GatewayDeps,
  ) {
    this.logger = deps.logger ?? silentLogger;
    this.clock = deps.clock ?? realClock;
    this.inFlight = new InFlight(this.clock);
    this.clusters = new ClusterDirectory(deps.hub, (cluster) => this.clusterRemoved(cluster), this.clock);
    this.metrics = new GatewayMetrics((cluster) => this.clusters.isKnown(cluster));
    this.caps = new UserCaps({
      maxRequests: options.maxRequestsPerUser,
      maxQueued: options.maxQueuedRequestsPerUser,
      queueTimeoutMs: options.queuedRequestTimeout,
      maxLongRunning: options.maxLongRunningPerUser,
      clock: this.clock,
      onRefusal: (reason) => this.metrics.fairnessRejections.inc({ reason }),
    });
    this.frontProxy = new FrontProxyTrust(this.clock);
    this.fleetModel = new FleetModel({ clock: this.clock });
  }

  /** The connections to the clusters' endpoints (exists once {@link start} has read the gateway identity). */
  get pool(): ClusterPool {
    if (!this.serving) throw new Error("the gateway has not started");
    return this.serving.pool;
  }

  /**
   * Read the files the options name, in the order of their flags' checks (--oidc-ca-file, the
   * mounted token, --proxy-*, --identity-*, --agent-ca; the audit log last), and build what needs
   * them.
   */
  private async serve(): Promise<Serving> {
    const options = this.options;
    const deps = this.deps;
    const clock = this.clock;
    const oidcTls =
      options.oidcIssuerUrl && options.oidcCaFile
        ? await loadTlsFiles({ ca: { flag: "--oidc-ca-file", path: options.oidcCaFile } })
        : {};
    const audiences = await this.tokenAudiences();
    // How clusters are reached: the injected dialer, else a TunnelClient to the proxy-servers.
    const route: { dialer: Dialer; tunnel?: TunnelClient } = deps.dialer
      ? { dialer: deps.dialer }
      : this.tunnelTo(
          await loadTlsFiles({
            ca: { flag: "--proxy-ca", path: options.proxyCa },
            cert: { flag: "--proxy-cert", path: options.proxyCert },
            key: { flag: "--proxy-key", path: options.proxyKey },
          }),
        );
    const identityFiles = gatewayIdentityFiles(options);
    const endpointTls: EndpointTls = await loadTlsFiles(identityFiles);
    const audit = deps.audit ?? openAuditSink(options);
    const oidc = options.oidcIssuerUrl
      ? new OidcAuthenticator({
          issuerUrl: options.oidcIssuerUrl,
          clientId: options.oidcClientId,
          ...oidcTls,
          usernameClaim: options.oidcUsernameClaim,
          usernamePrefix: options.oidcUsernamePrefix,
          groupsClaim: options.oidcGroupsClaim,
          groupsPrefix: options.oidcGroupsPrefix,
          requiredClaims: options.oidcRequiredClaim,
          clock,
        })
      : undefined;
    const onDenial = (reason: string): void => this.metrics.authorizationDenials.inc({ reason });
    const authenticator = new Authenticator({
      hub: audiences.reviewer,
      tokenReview: options.tokenReview,
      cacheTtlMs: options.authenticationCacheTtl,
      ...(oidc ? { oidc } : {}),
      passthroughUnrecognizedTokens: options.passthroughUnrecognizedTokens,
      reviewRatePerSource: options.tokenReviewRatePerSource,
      reviewBurstPerSource: options.tokenReviewBurstPerSource,
      onFailure: (reason) => this.metrics.authenticationFailures.inc({ reason }),
      onRateLimited: () => this.metrics.fairnessRejections.inc({ reason: "token-review-rate" }),
      clock,
    });
    const authorizer = new Authorizer({ hub: deps.hub, cacheTtlMs: options.authorizationCacheTtl, onDenial, clock });
    const admission: AdmissionDeps = {
      authenticator,
      authorizer,
      clusters: this.clusters,
      services: this.services,
      impersonationPrefix: options.impersonationPrefix,
      isFrontProxyHeader: (name) => this.frontProxy.isFrontProxyHeader(name),
      onDenial,
      clock,
    };
    const dialer = route.dialer;
    const pool = new ClusterPool(dialer, endpointTls, options.maxConnectionsPerCluster, clock);
    const fleet = deps.fleet ?? {};
    const fleetSource = new FleetSource({
      hub: deps.hub,
      model: this.fleetModel,
      probe: (cluster) =>
        probeEndpoint(dialer, cluster, pool.endpointTls, fleet.probeTimeoutMs ?? FLEET_PROBE_TIMEOUT_MS),
      ...(fleet.probeIntervalMs !== undefined ? { probeIntervalMs: fleet.probeIntervalMs } : {}),
      ...(fleet.probeConcurrency !== undefined ? { probeConcurrency: fleet.probeConcurrency } : {}),
      logger: this.logger,
      clock,
    });
    const viewers = new FleetViewers({
      authenticator,
      hub: deps.hub,
      cacheTtlMs: options.fleetAuthorizationCacheTtl,
      certificateOf: (req) => this.fleetRequests.get(req)?.certificate,
      sourceOf: (req) => this.fleetRequests.get(req)?.source,
      frontProxyOf: (req) => this.fleetRequests.get(req)?.frontProxy,
      onUnavailable: () => onDenial("authorization-unavailable"),
      clock,
    });
    const fleetHttp = new FleetHttp({
      model: this.fleetModel,
      identify: async (req) => {
        const who = await viewers.identify(req);
        const noted = this.fleetRequests.get(req);
        if (noted && who.ok) noted.rec.record.user = who.viewer.name;
        else if (noted && !who.ok) noted.refusal = who.message;
        return who;
      },
      ...(fleet.assets ? { assets: fleet.assets } : {}),
      ...(fleet.limits ? { limits: fleet.limits } : {}),
      clock,
    });
    const identityReloader = new CertReloader({
      what: "gateway identity",
      files: identityFiles,
      intervalMs: SERVING_CERT_POLL_MS,
      initial: endpointTls,
      apply: (m) => {
        if (m.cert && m.key && m.ca) pool.renew({ cert: m.cert, key: m.key, ca: m.ca });
      },
      logger: this.logger,
      timers: clock,
    });
    return { audit, admission, pool, tunnel: route.tunnel, fleet: fleetHttp, fleetSource, identityReloader };
  }

  /** A TunnelClient to --proxy-server-host/port with the --proxy-* material, and its dialer. */
  private tunnelTo(proxyTls: { ca: Buffer; cert: Buffer; key: Buffer }): { dialer: Dialer; tunnel: TunnelClient } {
    const options = this.options;
    const tunnel = new TunnelClient({
      proxy: { host: options.proxyServerHost, port: options.proxyServerPort, ...proxyTls },
      dialTimeoutMs: options.dialTimeout,
      keepaliveMs: 30_000,
      // A proxy-server that vanishes without a FIN while draining (its GOAWAY stops our pings)
      // would leave the requests through it silent, watches for ever: noticed in about 15 s.
      tcpKeepaliveMs: 5_000,
      logger: this.logger,
    });
    const dialer: Dialer = (address, signal) =>
      tunnel.dial(address, { timeoutMs: options.dialTimeout, ...(signal ? { signal } : {}) });
    return { dialer, tunnel };
  }

  /** The audience policy of hub TokenReviews (`token-audiences.ts`); logs what it asks for. */
  private async tokenAudiences(): Promise<TokenAudiences> {
    const o = this.options;
    // The mounted token is the hub's only when the gateway talks to the hub it runs on.
    const hubApiAudiences =
      o.hubApiAudiences.length > 0 || o.hubKubeconfig !== ""
        ? o.hubApiAudiences
        : await tokenFileAudiences(this.deps.serviceAccountTokenFile ?? MOUNTED_TOKEN_FILE);
    const audiences = new TokenAudiences(this.deps.hub, {
      tokenAudiences: o.tokenAudiences,
      acceptHubApiAudience: o.acceptHubApiAudience,
      hubApiAudiences,
    });
    if (o.tokenReview)
      this.logger.info(
        {
          audiences: audiences.requested,
          acceptHubApiAudience: o.acceptHubApiAudience,
          ...(o.acceptHubApiAudience && hubApiAudiences.length === 0 ? { hubApiAudiences: "unknown" } : {}),
        },
        "hub TokenReviews ask for these audiences",
      );
    return audiences;
  }

  /** The namespace of the services ConfigMap: --namespace, else the pod's. */
  private async namespace(): Promise<string> {
    if (this.options.namespace) return this.options.namespace;
    try {
      return (await readFile(MOUNTED_NAMESPACE_FILE, "utf8")).trim() || "default";
    } catch {
      return "default";
    }
  }

  /**
   * Read the files, listen on both ports and start watching the services ConfigMap. Resolves with
   * the ports. Once: a second call gets the first one's promise; a call after {@link close} began
   * rejects (and a close during the start makes it reject once the files are read).
   */
  start(): Promise<GatewayPorts> {
    return this.life.start(() => this.open());
  }

  private async open(): Promise<GatewayPorts> {
    const serving = await this.serve();
    this.serving = serving;
    const o = this.options;
    // A client certificate is asked for (never required) when either trust needs one: the
    // --client-ca-file users' (verified by the handshake) or the hub front proxy's (front-proxy.ts).
    const base: tls.SecureContextOptions & tls.TlsOptions = {
      ...(o.clientCaFile || o.frontProxyAuthentication ? { requestCert: true, rejectUnauthorized: false } : {}),
      ...(o.clientCaFile ? await loadTlsFiles({ ca: { flag: "--client-ca-file", path: o.clientCaFile } }) : {}),
    };
    const servingFiles = {
      cert: { flag: "--serving-cert", path: o.servingCert },
      key: { flag: "--serving-key", path: o.servingKey },
    };
    const { cert, key } = await loadTlsFiles(servingFiles);
    const ns = await this.namespace();
    // Closed while the files were read: open nothing (close is waiting for this to settle).
    if (this.life.closed) throw new Error("the gateway was closed while starting");
    const limits = callerLimitsOf(o, this.deps.limits);
    const server = http2.createSecureServer({
      ...base,
      cert,
      key,
      allowHTTP1: true,
      handshakeTimeout: limits.handshakeTimeoutMs,
      settings: { maxConcurrentStreams: limits.maxConcurrentStreams },
      // The hub apiserver's one connection carries every user of the aggregated path; resets before
      // an answer are bounded per connection by guardPort, and per user by the hub apiserver.
      ...MULTIPLEXED_SESSION_RESETS,
    });
    // Plain HTTP gets a 400 naming --port at once (not an empty reply after a failed handshake);
    // the guard is the listening socket, so the connection cap is its.
    const listener = guardPlainHttp(server, { flag: "--port", firstBytesTimeoutMs: limits.handshakeTimeoutMs });
    listener.maxConnections = limits.maxConnections;
    this.listener = listener;
    guardPort(
      server,
      limits,
      (reason) => this.metrics.refusedConnections.inc({ reason }),
      listener,
      (socket) => this.frontProxy.carries(socket),
      this.clock,
    );
    // CONNECT is refused like any method the gateway does not serve (over HTTP/1.1, without a
    // listener, Node would leave the connection hanging; over HTTP/2 this listener gets it too).
    server.on("connect", (req: AnyRequest, to: Duplex | http2.Http2ServerResponse) => {
      const rec = new RequestRecord(req.method ?? "CONNECT", serving.audit, this.metrics);
      const e = new GatewayError(405, "method-not-allowed", 'method "CONNECT" is not supported');
      if (to instanceof http2.Http2ServerResponse) {
        const body = `${e.message}\n`;
        to.writeHead(405, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(body) });
        to.end(body);
      } else {
        to.on("error", () => to.destroy());
        writeRawError(to, e);
      }
      rec.finish(405, e);
    });
    // With allowHTTP1, Node serves HTTP/1.1 with http.Server's machinery and honours its
    // headersTimeout (and checks it every connectionsCheckingInterval); @types/node does not
    // declare them on Http2SecureServer.
    Object.assign(server, {
      headersTimeout: limits.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, limits.headersTimeoutMs / 4)),
    });
    this.server = server;
    // The last resort: whatever escapes a request's own handling is logged and only that
    // request is cut; the gateway keeps serving everyone else.
    server.on("request", (req: AnyRequest, res: AnyResponse) => {
      void this.onRequest(serving, req, res).catch((err: unknown) => {
        this.logger.error({ err: errorMessage(err) }, "request handling failed");
        destroyQuietly(() =>
          "stream" in res ? res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR) : res.destroy(),
        );
      });
    });
    server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      void this.onUpgrade(serving, req, socket, head).catch((err: unknown) => {
        this.logger.error({ err: errorMessage(err) }, "upgrade handling failed");
        destroyQuietly(() => socket.destroy());
      });
    });
    server.on("secureConnection", (socket: tls.TLSSocket) => {
      // Answers are small and latency-bound (Nagle's algorithm cost ~40 ms per HTTP/1.1 answer).
      socket.setNoDelay(true);
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
    });
    server.on("session", (session: http2.ServerHttp2Session) => {
      this.sessions.add(session);
      session.once("close", () => this.sessions.delete(session));
    });
    server.on("sessionError", (err: Error) => this.logger.debug({ err: err.message }, "HTTP/2 session error"));
    server.on("tlsClientError", (err: Error) =>
      this.logger.debug({ err: err.message }, "TLS handshake with a caller failed"),
    );
    this.reloader = new CertReloader({
      what: "gateway port",
      files: servingFiles,
      intervalMs: SERVING_CERT_POLL_MS,
      initial: { cert, key },
      apply: (m) => server.setSecureContext({ ...base, cert: m.cert, key: m.key }),
      logger: this.logger,
      timers: this.clock,
    });
    this.reloader.start();
    serving.identityReloader.start();
    listener.listen(o.port, this.deps.bindAddress);
    await once(listener, "listening");
    // The HTTP/1.1 side's headersTimeout is checked by machinery Node starts on the server's
    // "listening" event, which the guard in front of it takes: tell the server.
    server.emit("listening");
    const port = (listener.address() as net.AddressInfo).port;
    const health = await listenEndpointServer(
      createEndpointServer(
        healthPortEndpoints({
          registry: this.metrics.registry,
          readiness: () =>
            this.ready && !this.life.stopping
              ? { status: 200, body: "ok" }
              : { status: 503, body: "not ready: shutting down\n" },
        }),
      ),
      { host: this.deps.bindAddress, port: o.healthPort, flag: "--health-port" },
    );
    this.health = health.server;
    const ports = { port, healthPort: health.address.port };
    const name = o.exposedServicesConfigmap;
    this.stopWatch = this.deps.hub.watchConfigMap(ns, name, (data) => {
      const u = this.services.update(data);
      if (u.kind === "loaded")
        this.logger.info({ configMap: `${ns}/${name}`, entries: u.entries }, "exposed services loaded");
      else if (u.kind === "deleted")
        this.logger.warn(
          { configMap: `${ns}/${name}` },
          "exposed services ConfigMap is missing: no Service is exposed",
        );
      else {
        this.logger.error(
          { configMap: `${ns}/${name}`, problem: u.problem },
          "refused an update of the exposed services; keeping the last good list",
        );
        this.deps.hub
          .configMapEvent(
            ns,
            name,
            "InvalidExposedServices",
            `refused: ${u.problem}; the gateway keeps the last good list`,
          )
          .catch((err: unknown) =>
            this.logger.warn({ err: errorMessage(err) }, "cannot record an Event about the exposed services"),
          );
      }
    });
    if (o.frontProxyAuthentication) this.watchFrontProxy();
    serving.fleetSource.start();
    this.ready = true;
    return ports;
  }

  /** Follow the hub's requestheader settings (the aggregated path's trust), logging each change. */
  private watchFrontProxy(): void {
    const { namespace, name } = EXTENSION_AUTH_CONFIGMAP;
    const where = { configMap: `${namespace}/${name}` };
    this.stopFrontProxyWatch = this.deps.hub.watchConfigMap(namespace, name, (data) => {
      const u = this.frontProxy.update(data);
      if (u.kind === "loaded" && u.allowedNames.length === 0)
        this.logger.warn(
          where,
          "the hub lists no requestheader-allowed-names: every client certificate its requestheader CA signed is believed as the front proxy (as the hub apiserver itself does); set --requestheader-allowed-names on the hub apiserver",
        );
      else if (u.kind === "loaded")
        this.logger.info(
          { ...where, allowedNames: u.allowedNames },
          "the hub apiserver's front proxy is trusted (the aggregated path)",
        );
      else if (u.kind === "absent")
        this.logger.warn(where, "the hub publishes no requestheader CA: the aggregated path is off");
      else
        this.logger.error(
          { ...where, problem: u.problem },
          "refused the hub's requestheader settings; keeping the last good ones",
        );
    });
  }

  /** Check the serving certificate files now (tests; they are polled anyway). */
  reloadServingCertificate(): Promise<ReloadResult> {
    return this.reloader?.check() ?? Promise.resolve("unchanged");
  }

  /** Check the identity files (--identity-cert, --identity-key, --agent-ca) now (tests). */
  reloadIdentity(): Promise<ReloadResult> {
    return this.serving?.identityReloader.check() ?? Promise.resolve("unchanged");
  }

  private clusterRemoved(cluster: string): void {
    this.serving?.pool.forget(cluster);
    void this.metrics.forgetCluster(cluster);
  }

  private async onRequest(s: Serving, req: AnyRequest, res: AnyResponse): Promise<void> {
    const end = this.inFlight.begin();
    if (this.life.stopping) {
      // Draining: this answer is the connection's last (the caller's next request goes elsewhere).
      if ("stream" in res) res.stream.session?.close();
      else res.shouldKeepAlive = false;
    }
    const path = (req.url ?? "").split("?")[0]!;
    const discovery = req.method === "GET" ? discoveryDocument(path) : undefined;
    if (discovery || isOpenApiPath(path)) {
      const body = discovery ? JSON.stringify(discovery) : "the gateway publishes no OpenAPI document\n";
      const type = discovery ? "application/json" : "text/plain; charset=utf-8";
      res.writeHead(discovery ? 200 : 404, { "content-type": type, "content-length": Buffer.byteLength(body) });
      res.end(body);
      end();
      return;
    }
    // The fleet view on the aggregated path is the cluster `-` (the gateway's own `/-/fleet/`).
    const aggregated = fromAggregatedUrl(req.url ?? "/");
    const fleetUrl = typeof aggregated === "string" ? aggregated : req.url;
    if (FleetHttp.owns(fleetUrl)) {
      // Whatever throws here, the request is counted out (a leaked count held every shutdown for
      // its whole grace period) and the last-resort handler cuts it.
      try {
        await this.onFleetRequest(s, req, res, fleetUrl);
      } finally {
        end();
      }
      return;
    }
    const rec = new RequestRecord(req.method ?? "GET", s.audit, this.metrics, s.fleetSource.tap);
    const exchange = sandboxed(exchangeOf(req, res));
    try {
      if (this.life.closed) throw new GatewayError(503, "shutting-down", "the gateway is shutting down");
      const gone = closeSignal(res);
      const head = headOf(req, false, this.frontProxy, this.options.clientCaFile !== "");
      const a = await admit(s.admission, head, rec);
      // Before any tunnel: a body the hop could not frame goes nowhere (400).
      const framing = bodyFraming(
        req.method ?? "GET",
        req.headers,
        "stream" in req ? req.stream.endAfterHeaders : undefined,
      );
      const caller = callerKey(a.caller, head.source);
      releaseOn(gone, await this.caps.acquire(a.cluster, caller, kindOf(a.target, false), gone));
      rec.startStreaming();
      let code: number;
      try {
        code = await relayRequest(
          {
            cluster: a.cluster,
            sessions: s.pool.sessionsFor(a.cluster),
            method: req.method ?? "GET",
            path: a.path,
            headers: a.headers,
          },
          framing,
          exchange,
          { in: (n) => rec.addIn(n), out: (n) => rec.addOut(n) },
          this.retryRecorder(a.cluster, req.method ?? "GET"),
        );
      } catch (err) {
        throw relayError(a.cluster, err);
      }
      rec.finish(code);
    } catch (err) {
      const e = asGatewayError(err);
      if (e.status >= 500 && e.status !== 503) this.logger.warn({ err: e.message }, "request failed");
      if (!res.headersSent && !res.writableEnded) {
        const body = `${e.message}\n`;
        destroyQuietly(() => {
          res.writeHead(e.status, {
            "content-type": "text/plain; charset=utf-8",
            "content-length": Buffer.byteLength(body),
            ...(e.retryAfterSeconds !== undefined ? { "retry-after": String(e.retryAfterSeconds) } : {}),
          });
          res.end(body);
        });
      } else destroyQuietly(() => exchange.destroy());
      rec.finish(e.status, e);
    } finally {
      end();
    }
  }

  /** A request for the fleet view (its own `/-/fleet/` or the aggregated path's cluster `-`). */
  private async onFleetRequest(
    s: Serving,
    req: AnyRequest,
    res: AnyResponse,
    fleetUrl: string | undefined,
  ): Promise<void> {
    const socket = tlsSocketOf(req);
    const certificate = clientCertificateOf(socket, this.options.clientCaFile !== "");
    const frontProxy = this.frontProxy.identify(socket, req.rawHeaders);
    // Audited like any other request (401s too), when the response ends; not counted in the
    // request metrics, which are by cluster.
    const rec = new RequestRecord(req.method ?? "GET", s.audit, undefined);
    rec.record.path = (req.url ?? "").split("?")[0];
    const fleetReq: FleetRequest = {
      ...(req.method ? { method: req.method } : {}),
      url: fleetUrl,
      headers: req.headers,
    };
    const noted: FleetRequestContext = {
      rec,
      ...(certificate ? { certificate } : {}),
      ...(frontProxy ? { frontProxy } : {}),
      ...(socket?.remoteAddress !== undefined ? { source: socket.remoteAddress } : {}),
    };
    this.fleetRequests.set(fleetReq, noted);
    res.once("close", () => rec.finish(res.statusCode, undefined, noted.refusal));
    await s.fleet.handle(
      fleetReq,
      fleetResponseOf(res, (n) => rec.addOut(n)),
    );
  }

  /** What a retry on another endpoint connection leaves behind: a metric and a debug line. */
  private retryRecorder(cluster: string, method: string): (reason: RetryReason, err: Error) => void {
    return (reason, err) => {
      this.metrics.endpointRetries.inc({ cluster: this.metrics.clusterLabel(cluster), reason });
      this.logger.debug(
        { cluster, method, reason, err: err.message },
        "retrying a request on another gateway endpoint connection",
      );
    };
  }

  private async onUpgrade(s: Serving, req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const rec = new RequestRecord(req.method ?? "GET", s.audit, this.metrics, s.fleetSource.tap);
    rec.record.upgrade = true;
    // Each direction of an upgraded stream ends on its own (half-close), so the caller's end of
    // input must not end our output to it.
    socket.allowHalfOpen = true;
    this.upgrades.add(socket);
    socket.once("close", () => this.upgrades.delete(socket));
    socket.on("error", () => socket.destroy());
    try {
      if (this.life.closed) throw new GatewayError(503, "shutting-down", "the gateway is shutting down");
      checkUpgradeFraming(req.headers);
      const requestHead = headOf(req, true, this.frontProxy, this.options.clientCaFile !== "");
      const a = await admit(s.admission, requestHead, rec);
      checkUpgradeOrigin(req.headers, this.options.allowedUpgradeOrigins);
      const gone = new AbortController();
      socket.once("close", () => gone.abort());
      const caller = callerKey(a.caller, requestHead.source);
      releaseOn(gone.signal, await this.caps.acquire(a.cluster, caller, "long-running", gone.signal));
      rec.startStreaming();
      const code = await relayUpgrade(
        {
          cluster: a.cluster,
          sessions: s.pool.sessionsFor(a.cluster),
          method: req.method ?? "GET",
          path: a.path,
          headers: a.headers,
        },
        socket,
        head,
        { in: (n) => rec.addIn(n), out: (n) => rec.addOut(n) },
        (endpoint) => {
          this.upgrades.add(endpoint);
          endpoint.once("close", () => this.upgrades.delete(endpoint));
        },
        this.retryRecorder(a.cluster, req.method ?? "GET"),
      );
      rec.finish(code);
    } catch (err) {
      const e = asGatewayError(err);
      if (e.retryAfterSeconds !== undefined) writeRawTooMany(socket, e);
      else writeRawError(socket, e);
      rec.finish(e.status, e);
    }
  }

  /**
   * The graceful start of a stop (SIGTERM): /readyz turns 503 and, for --shutdown-delay (on the
   * gateway's clock), the gateway keeps serving everything, new connections too (the Service may
   * still send them here until it has seen the readiness), while it moves its callers elsewhere:
   * HTTP/1.1 answers carry `Connection: close`, HTTP/2 connections get GOAWAY once their streams
   * are done (and new ones at their first request). Then {@link close} stops accepting. Resolves
   * true (nothing is cut here); once: a second call gets the first one's promise, a call after
   * close began resolves false.
   */
  drain(): Promise<boolean> {
    return this.life.drain(async () => {
      for (const s of this.sessions) s.close();
      const delay = this.options.shutdownDelay;
      if (delay > 0) await new Promise<void>((resolve) => this.clock.setTimeout(resolve, delay));
      return true;
    });
  }

  /**
   * Shut down: /readyz turns 503, the port stops accepting, in-flight requests get up to
   * `graceMs` (on the gateway's clock; 0: none) to finish; then upgraded streams and every
   * connection are closed. Once: a second call gets the first one's promise (and its grace). A
   * start under way settles first, and what it opened is closed.
   */
  close(graceMs = SHUTDOWN_GRACE_MS): Promise<void> {
    return this.life.close(async () => {
      await this.life.startSettled();
      const s = this.serving;
      this.stopWatch?.();
      this.stopFrontProxyWatch?.();
      s?.fleetSource.stop();
      s?.fleet.close();
      this.reloader?.stop();
      s?.identityReloader.stop();
      const server = this.server;
      const listener = this.listener;
      const closed = Promise.all([
        server ? new Promise<void>((r) => server.close(() => r())) : undefined,
        listener ? new Promise<void>((r) => listener.close(() => r())) : undefined,
      ]);
      if (graceMs > 0) await this.inFlight.whenIdle(graceMs);
      for (const u of this.upgrades) u.destroy();
      // A response that finished just now may still be on its way out: connections end after what
      // was written to them, and one that does not close within a second is cut.
      await Promise.all([...this.sockets].map((socket) => endGracefully(socket, SOCKET_END_MS)));
      await closed;
      s?.pool.destroy();
      await s?.tunnel?.close();
      if (this.health) await closeEndpointServer(this.health);
      s?.audit.close();
    });
  }
}
