/**
 * The proxy-server process: the agent port (mTLS gRPC `AgentService`), the front doors (gRPC
 * `ProxyService` and HTTP CONNECT, over mTLS TCP or plain Unix sockets), the health and admin
 * ports, all sharing one relay.
 */
import { constants as cryptoConstants, randomUUID } from "node:crypto";
import { chmod, unlink } from "node:fs/promises";
import * as http from "@cluster-proxy/kit/http";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as tls from "node:tls";
import {
  ConfigError,
  effectiveAgentIdentity,
  planFrontDoors,
  tlsProfileOptions,
  usesTokenAuth,
  type FrontDoor,
  type ProxyStrategy,
  type ServerOptions,
} from "@cluster-proxy/api";
import { AGENT_CONNECT_METHOD, PROXY_METHOD } from "@cluster-proxy/protocol";
import {
  GrpcStatus,
  TUNNEL_HTTP2_OPTIONS,
  IDLE_PROBE_MAX_MS,
  IDLE_PROBE_MS,
  keepSessionAlive,
  loadTlsFiles,
  probeIdleSession,
  serveGrpc,
  widenSessionWindow,
  type TlsFiles,
  type TlsMaterial,
} from "@cluster-proxy/tunnel";
import { Lifecycle, realClock, silentLogger, type Clock, type Component, type Logger } from "@cluster-proxy/kit";
import { createEndpointServer, type ProbeAnswer } from "@cluster-proxy/kit/endpoints";
import { adminPortEndpoints, healthPortEndpoints } from "@cluster-proxy/kit/process";
import { handleAgentCall } from "./agents/agent-service.js";
import type { IdentifierTraffic } from "./routing/cluster-traffic.js";
import { probeDial, type DialProbeResult } from "./front-doors/probe-dial.js";
import {
  serverTlsFiles,
  startServerCertReloading,
  type ServerCertReloading,
  type TlsListener,
} from "./listeners/cert-reloading.js";
import { HandshakeFailureLog, type PortTls } from "./listeners/handshake-failures.js";
import { createAgentUpgradeDoor } from "./agents/agent-upgrade-door.js";
import { AdmissionLog } from "./listeners/admission-log.js";
import { plainHttpOnTlsPortResponse } from "./listeners/first-bytes.js";
import { HandshakePacer, type PacerState } from "./listeners/handshake-pacer.js";
import { ConnectDoorClient } from "./front-doors/http-connect.js";
import { ServerMetrics } from "./metrics.js";
import { ProxyStream } from "./front-doors/proxy-service.js";
import { payloadRelay, type PayloadRelay } from "./routing/payload-relay.js";
import { Relay } from "./routing/relay.js";
import { sharedCaSubjects } from "./listeners/server-config.js";
import { authenticateAgentToken, kubernetesTokenReview, type TokenReviewFn } from "./agents/token-review.js";
import { errorMessage } from "@cluster-proxy/errors";
import { AGENT_TICKET_DOOR, ServerTicketKeys } from "./listeners/ticket-doors.js";

const { SSL_OP_NO_TICKET } = cryptoConstants;

/** How long the idle probe waits for a PING answer when --keepalive-timeout is 0. */
const DEFAULT_PROBE_TIMEOUT_MS = 10_000;

/** The health port's `/readyz` answer, in the Go server's text (ready: see {@link ProxyServer.ready}). */
function serverReadiness(state: "ready" | "no_agent" | "draining"): ProbeAnswer {
  if (state === "ready") return { status: 200, body: "ok" };
  if (state === "draining") return { status: 500, body: "proxy server is draining" };
  return { status: 500, body: "no connection to any proxy agent" };
}

/** Where the server actually listens (ports resolved when 0 was asked for). */
export interface ServerAddresses {
  /** The --server-port front door (TCP), else its Unix socket path. */
  server?: net.AddressInfo | string;
  /** The HTTP CONNECT front door (TCP), else its Unix socket path. */
  httpConnect?: net.AddressInfo | string;
  /** Unix socket of the --uds-name front door, when it also has a TCP port. */
  serverUds?: string;
  /** Unix socket of the HTTP CONNECT front door, when it also has a TCP port. */
  httpConnectUds?: string;
  agent?: net.AddressInfo;
  /** The agent upgrade door (--agent-upgrade-port), when on. */
  agentUpgrade?: net.AddressInfo;
  health?: net.AddressInfo;
  admin?: net.AddressInfo;
}

export interface ProxyServerDeps {
  logger?: Logger;
  /** TokenReview client for ServiceAccount token authentication (default: the apiserver of --kubeconfig). */
  tokenReview?: TokenReviewFn;
  /**
   * The clock of the relay's protocol timers (dial deadlines, lingers, stall checks), the HTTP
   * CONNECT door's and the handshake pacers', and the time a resumed session's certificate
   * validity is checked at (its `now()` read as Unix ms; default: the kit's `realClock`).
   */
  clock?: Clock;
}

interface Listener {
  server: net.Server;
  /** Feeds `server`'s connections to a TLS server at a bounded rate (TLS ports). */
  pacer?: HandshakePacer;
  door?: FrontDoor;
  role: "agent" | "agent-upgrade" | "front" | "health" | "admin";
}

/** Which of a door's TLS servers: its own, or the twin that holds the previous ticket key. */
type TicketSide = "primary" | "twin";

/** The ticket key door (HKDF info and session id context) of a front door. */
function ticketDoor(door: FrontDoor): string {
  return `${door.protocol}${door.flag}`;
}

/** The TLS flags of a front door, for handshake failure messages. */
function frontTls(door: FrontDoor): PortTls {
  return { port: door.flag, clientCa: "--server-ca-cert", cert: "--server-cert", front: true };
}

export class ProxyServer implements Component {
  readonly serverId: string;
  /** Metrics of this server (its own registry). */
  readonly metrics: ServerMetrics;
  private readonly relay: Relay;
  /** The server's clock: the relay's, the HTTP CONNECT door's and the handshake pacers' timers, and the resumed sessions' certificate checks. */
  private readonly clock: Clock;
  /** The relay as the HTTP CONNECT door sees it: payloads in and out. */
  private readonly payloads: PayloadRelay;
  private readonly log: Logger;
  private readonly listeners: Listener[] = [];
  private readonly sessions = new Set<http2.Http2Session>();
  private readonly sockets = new Set<net.Socket>();
  /**
   * Every connection a listener accepted and that is still open, whatever it is doing (in or
   * before its TLS handshake, half-closed, upgraded to a session): what shutdown destroys last so
   * that it completes within --graceful-shutdown-timeout (a listener closes only when all its
   * connections are gone, and node gives a stalled TLS handshake 120 s).
   */
  private readonly accepted = new Set<net.Socket>();
  private readonly tlsListeners: TlsListener[] = [];
  private certReloading: ServerCertReloading | undefined;
  /** Session ticket keys of the TLS ports (undefined: --tls-session-ticket-lifetime=0, no tickets). */
  private ticketKeys: ServerTicketKeys | undefined;
  /** The ticket doors of the TCP client front doors with TLS (they trust --server-ca-cert). */
  private frontTicketDoors: string[] = [];
  private readonly life = new Lifecycle<void>("proxy-server");
  /** When start() began (the clock's ms): --ready-after-agents-timeout counts from here. */
  private startedAt = 0;
  /** Past --shutdown-delay: sessions get GOAWAY, new dials are refused. */
  private goingAway = false;
  private cutDelay: (() => void) | undefined;
  /** Ends a drain's wait at once (close() during a drain: the second signal). */
  private cutDrain: (() => void) | undefined;
  /** --cipher-suites / --tls-min-version as node TLS options, for every TLS port. */
  private readonly tlsProfile: ReturnType<typeof tlsProfileOptions>;
  private tokenReview: TokenReviewFn | undefined;
  /** The options, validated, every default applied. */
  private readonly options: ServerOptions;
  private readonly handshakeFailures: HandshakeFailureLog;
  private readonly admissionLog: AdmissionLog;

  /** `options` as `parseServerOptions` returns them (validated, every default applied). */
  constructor(options: ServerOptions, deps: ProxyServerDeps = {}) {
    this.options = options;
    this.tlsProfile = tlsProfileOptions(options.cipherSuites, options.tlsMinVersion);
    this.tokenReview = deps.tokenReview;
    this.serverId = options.serverId || randomUUID();
    this.log = (deps.logger ?? silentLogger).child({ component: "proxy-server", serverID: this.serverId });
    this.handshakeFailures = new HandshakeFailureLog(this.log, undefined, undefined, deps.clock ?? realClock);
    this.admissionLog = new AdmissionLog(this.log, undefined, deps.clock ?? realClock);
    const strategies = options.proxyStrategies as ProxyStrategy[];
    // The gauges read the relay at scrape time (after construction).
    this.metrics = new ServerMetrics({
      readyBackends: () => this.relay.router.strategies.map((s) => ({ strategy: s.name, count: s.size() })),
      pendingDials: () => this.relay.pendingCount(),
      dialsWaitingForAgent: () => this.relay.waitingCount(),
      establishedConnections: () => this.relay.establishedCount(),
      backendCount: () => this.relay.backends.size,
      backendsByIdentifier: () => this.agentsByIdentifier(),
      handshakesWaiting: () => this.pacerStates((s) => s.waiting),
      awaitingHello: () => this.pacerStates((s) => s.awaitingHello),
    });
    this.clock = deps.clock ?? realClock;
    this.relay = new Relay({
      strategies,
      backendDialTimeoutMs: options.backendDialTimeout,
      connectionStallTimeoutMs: options.connectionStallTimeout,
      logger: this.log,
      metrics: this.metrics,
      clock: this.clock,
      agentWaitMs: () => this.warmUpWaitMs(),
    });
    this.payloads = payloadRelay(this.relay);
  }

  /** One number of each TLS port's pacer, by port flag (without the dashes). */
  private pacerStates(pick: (state: PacerState) => number): Map<string, number> {
    const out = new Map<string, number>();
    for (const l of this.listeners) {
      const flag = l.door?.flag ?? (l.role === "agent" ? "--agent-port" : undefined);
      if (l.pacer && flag) out.set(flag.replace(/^--/, ""), pick(l.pacer.state()));
    }
    return out;
  }

  /** Agent streams currently connected. */
  backendCount(): number {
    return this.relay.backends.size;
  }

  /** Agent streams connected per `host` identifier (cluster). */
  agentsByIdentifier(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const b of this.relay.backends) {
      for (const h of new Set(b.identifiers.host)) counts.set(h, (counts.get(h) ?? 0) + 1);
    }
    return counts;
  }

  /**
   * Traffic per `host` identifier (cluster) since the server started: dials answered and failed,
   * bytes each way, connections open now (a copy; see cluster-traffic.ts).
   */
  trafficByIdentifier(): Map<string, IdentifierTraffic> {
    return this.relay.traffic.snapshot();
  }

  /**
   * Dial `address` (e.g. `east:80`) from inside the server and close the connection once the
   * agent answers: the round trip through the tunnel and the agent's dial, or why it failed. Not
   * counted in {@link trafficByIdentifier}. Never rejects.
   */
  probe(address: string, timeoutMs: number): Promise<DialProbeResult> {
    return probeDial(this.relay, address, timeoutMs);
  }

  /**
   * What `/readyz` answers: never ready while draining or closing; else ready once the first
   * strategy can route somewhere (an agent is connected), or once --ready-after-agents-timeout
   * has passed since start without one (0: only with an agent, as Go). So a replica that a rollout
   * starts gets its agents before it takes dials, and a hub without clusters still gets ready.
   */
  readiness(): "ready" | "no_agent" | "draining" {
    if (this.life.stopping) return "draining";
    if (this.relay.router.ready()) return "ready";
    const wait = this.options.readyAfterAgentsTimeout;
    return this.life.started && wait > 0 && this.clock.now() - this.startedAt >= wait ? "ready" : "no_agent";
  }

  /**
   * How long a dial that finds no agent may wait now for one to connect (--warm-up-dial-wait, W):
   * a replica that just started takes clients (it is ready) before every cluster's agent has found
   * it, so during its warm-up, until W after it got ready (an agent connected, or
   * --ready-after-agents-timeout passed), a dial waits at most W (never past the warm-up's end)
   * instead of failing at once. 0 after the warm-up and from drain() on.
   */
  private warmUpWaitMs(): number {
    const wait = this.options.warmUpDialWait;
    if (wait <= 0 || this.life.stopping) return 0;
    const readyAfter = this.options.readyAfterAgentsTimeout;
    const readyAt = Math.min(
      this.relay.routableSince ?? Infinity,
      readyAfter > 0 ? this.startedAt + readyAfter : Infinity,
    );
    return Math.max(0, Math.min(wait, readyAt + wait - this.clock.now()));
  }

  /** Whether `/readyz` answers ready ({@link readiness}). */
  ready(): boolean {
    return this.readiness() === "ready";
  }

  /**
   * Listen on every configured port. Rejects with a TlsFileError naming the flag on bad TLS files,
   * a ConfigError naming it on bad ports.
   */
  start(): Promise<void> {
    return this.life.start(() => this.listen());
  }

  private async listen(): Promise<void> {
    this.startedAt = this.clock.now();
    const o = this.options;
    try {
      const tokenAuth = usesTokenAuth(o);
      // With ServiceAccount token authentication the agent port trusts no client CA.
      const agentFiles = serverTlsFiles(
        "cluster",
        o.clusterCert,
        o.clusterKey,
        tokenAuth ? undefined : o.clusterCaCert,
      );
      const agentTls = await loadTlsFiles(agentFiles);
      if (tokenAuth && !this.tokenReview) {
        this.tokenReview = await kubernetesTokenReview(o.kubeconfig, o.kubeconfigQps, o.kubeconfigBurst, this.clock);
      }
      if (o.tlsSessionTicketLifetime > 0) {
        this.ticketKeys = await ServerTicketKeys.load({
          file: o.tlsSessionTicketKeyFile,
          lifetimeMs: o.tlsSessionTicketLifetime,
          intervalMs: o.certReloadInterval,
          logger: this.log,
          onReload: (result) => this.metrics.ticketKeyReloads.inc({ result }),
          timers: this.clock,
        });
        this.ticketKeys.trust([AGENT_TICKET_DOOR], agentTls.ca);
      }
      const doors = planFrontDoors(o);
      let front: { files: TlsFiles; material: TlsMaterial } | undefined;
      this.frontTicketDoors = doors.filter((d) => d.transport === "tcp" && !d.plain).map(ticketDoor);
      if (this.frontTicketDoors.length > 0) {
        const files = serverTlsFiles("server", o.serverCert, o.serverKey, o.serverCaCert);
        front = { files, material: await loadTlsFiles(files) };
        this.ticketKeys?.trust(this.frontTicketDoors, front.material.ca);
        const shared = agentTls.ca && front.material.ca ? sharedCaSubjects(front.material.ca, agentTls.ca) : [];
        if (shared.length > 0)
          this.log.warn(
            { ca: shared },
            "--server-ca-cert and --cluster-ca-cert trust the same CA: an agent certificate is accepted at the client front doors too; give each its own CA (cluster-proxy certs writes client-ca.crt and agent-ca.crt)",
          );
      }

      const agentServer = this.createAgentServer(agentTls, !tokenAuth, "primary");
      if (this.ticketKeys) {
        const twin = this.createAgentServer(agentTls, !tokenAuth, "twin");
        this.ticketKeys.register(AGENT_TICKET_DOOR, agentServer, twin);
      }
      await this.listenTcp(
        agentServer,
        "agent",
        o.agentPort,
        o.agentBindAddress,
        "--agent-port",
        undefined,
        AGENT_TICKET_DOOR,
      );
      if (o.agentUpgradePort > 0) await this.listenAgentUpgradeDoor();
      for (const door of doors) await this.listenDoor(door, front?.material);
      await this.listenTcp(
        createEndpointServer(
          healthPortEndpoints({ registry: this.metrics.registry, readiness: () => serverReadiness(this.readiness()) }),
        ),
        "health",
        o.healthPort,
        o.healthBindAddress,
        "--health-port",
      );
      await this.listenTcp(
        createEndpointServer(adminPortEndpoints(this.metrics.registry, o.enableProfiling === true)),
        "admin",
        o.adminPort,
        o.adminBindAddress,
        "--admin-port",
      );
      this.certReloading = startServerCertReloading({
        options: o,
        metrics: this.metrics,
        logger: this.log,
        listeners: this.tlsListeners,
        agent: { files: agentFiles, material: agentTls },
        front,
        afterReload: (role, material) => {
          this.ticketKeys?.trust(role === "agent" ? [AGENT_TICKET_DOOR] : this.frontTicketDoors, material.ca);
          this.ticketKeys?.apply();
        },
      });
      this.ticketKeys?.start();
    } catch (err) {
      await this.closeListeners();
      throw err;
    }
  }

  /**
   * Re-read the certificate files now instead of at the next --cert-reload-interval tick;
   * resolves with each file set's result (agent port first).
   */
  reloadCertificates(): Promise<string[]> {
    return this.certReloading?.checkNow() ?? Promise.resolve([]);
  }

  /**
   * Re-read --tls-session-ticket-key-file now instead of at the next --cert-reload-interval tick
   * ("unchanged" without resumption or a key file).
   */
  reloadTicketKeys(): Promise<"unchanged" | "reloaded" | "failed"> {
    return this.ticketKeys?.check() ?? Promise.resolve("unchanged");
  }

  /**
   * The TLS options of resumption for `door`'s server (or its twin): the door's session id
   * context, ticket lifetime and key; without resumption no tickets at all (they would cost about
   * 10 KiB of memory per connected agent for nothing).
   */
  private resumptionOptions(door: string, side: TicketSide): tls.TlsOptions {
    return this.ticketKeys?.tlsOptions(door, side) ?? { secureOptions: SSL_OP_NO_TICKET };
  }

  /**
   * The checks of a resumed session (a ticket skips the certificate exchange, so nothing else
   * checks the certificate again): with client certificates, the certificate the session carries
   * must still be within its validity now, else the connection is closed and the client's next
   * one is a full handshake. Counts every handshake, full or resumed.
   */
  private checkResumption(server: tls.Server, port: string, clientCerts: boolean): void {
    server.on("secureConnection", (socket: tls.TLSSocket) => {
      if (!socket.isSessionReused()) {
        this.metrics.tlsHandshakes.inc({ port, kind: "full" });
        return;
      }
      if (clientCerts) {
        const cert = socket.getPeerX509Certificate();
        const now = this.clock.now();
        const problem = !cert
          ? "no client certificate"
          : now > Date.parse(cert.validTo)
            ? `client certificate expired at ${new Date(cert.validTo).toISOString()}`
            : now < Date.parse(cert.validFrom)
              ? "client certificate not valid yet"
              : undefined;
        if (problem) {
          this.metrics.tlsHandshakes.inc({ port, kind: "resumed_refused" });
          this.log.debug({ port, remote: socket.remoteAddress, problem }, "refusing a resumed TLS session");
          socket.destroy();
          return;
        }
      }
      this.metrics.tlsHandshakes.inc({ port, kind: "resumed" });
    });
  }

  private secureServerOptions(material: tls.SecureContextOptions, clientCerts = true): http2.SecureServerOptions {
    return {
      ...TUNNEL_HTTP2_OPTIONS,
      ...material,
      requestCert: clientCerts,
      rejectUnauthorized: clientCerts,
      ALPNProtocols: ["h2"],
      ...this.tlsProfile,
      allowHTTP1: false,
      handshakeTimeout: this.options.handshakeTimeout,
    };
  }

  /**
   * The agent upgrade door (--agent-upgrade-port): upgraded connections join the agent port's
   * listener (its handshake pacer), exactly as if they had been accepted there.
   */
  private async listenAgentUpgradeDoor(): Promise<void> {
    const o = this.options;
    const agentListener = this.listeners.find((l) => l.role === "agent")?.server;
    if (!agentListener) throw new Error("the agent port must listen before its upgrade door");
    const door = createAgentUpgradeDoor({
      headerTimeoutMs: o.agentUpgradeHeaderTimeout,
      handOver: (socket) => {
        if (this.life.closed) socket.destroy();
        else agentListener.emit("connection", socket);
      },
      onRefused: (reason, remote) => {
        this.metrics.connectionsRefused.inc({ port: "agent-upgrade-port", reason });
        this.admissionLog.refused("--agent-upgrade-port", reason, { remote });
      },
    });
    await this.listenTcp(door, "agent-upgrade", o.agentUpgradePort, o.agentBindAddress, "--agent-upgrade-port");
  }

  /** Common hardening and session tracking for an HTTP/2 server. */
  private watchHttp2(
    server: http2.Http2Server | http2.Http2SecureServer,
    what: string,
    keepaliveMs: number,
    portTls?: PortTls,
  ): void {
    server.on("session", (session: http2.ServerHttp2Session) => {
      this.sessions.add(session);
      // Draining: GOAWAY before any stream (a client's or agent's first stream is refused
      // unprocessed, REFUSED_STREAM, and it goes to another replica).
      if (this.goingAway) session.close();
      session.on("error", (err: Error) => this.log.debug({ err: err.message, what }, "HTTP/2 session error"));
      session.once("close", () => this.sessions.delete(session));
      widenSessionWindow(session);
      keepSessionAlive(session, keepaliveMs, this.options.keepaliveTimeout, (reason) => {
        this.metrics.unresponsiveSessions.inc({ port: what, probe: "keepalive" });
        this.log.warn({ what, reason }, "closing dead HTTP/2 session");
      });
      // A session nghttp2 ended by itself (GOAWAY after a protocol error or a flood) reads and
      // writes nothing more and node never closes it: the idle probe frees it (issue 25). It also
      // finds a peer gone silent (a frozen agent, a link that drops everything).
      probeIdleSession(
        session,
        IDLE_PROBE_MS,
        this.options.keepaliveTimeout || DEFAULT_PROBE_TIMEOUT_MS,
        (reason) => {
          this.metrics.unresponsiveSessions.inc({ port: what, probe: "idle_probe" });
          this.log.debug({ what, reason }, "closing an HTTP/2 session that stopped answering");
        },
        IDLE_PROBE_MAX_MS,
      );
    });
    server.on("sessionError", (err: Error) => this.log.debug({ err: err.message, what }, "HTTP/2 session error"));
    if (portTls) {
      server.on("tlsClientError", (err: Error, socket: tls.TLSSocket) =>
        this.handshakeFailures.failed(err, socket, portTls),
      );
    }
    server.on("unknownProtocol", (socket: net.Socket) => {
      this.log.debug({ what }, "refusing connection without ALPN h2");
      socket.destroy();
    });
  }

  private createAgentServer(
    material: tls.SecureContextOptions,
    clientCerts: boolean,
    side: TicketSide,
  ): http2.Http2SecureServer {
    // Session tickets (our agents resume on reconnect; Go's never do) unless resumption is off.
    const options = {
      ...this.secureServerOptions(material, clientCerts),
      ...this.resumptionOptions(AGENT_TICKET_DOOR, side),
    };
    const server = http2.createSecureServer(options);
    this.tlsListeners.push({ server, role: "agent", options });
    this.checkResumption(server, "agent-port", clientCerts);
    this.watchHttp2(server, "agent", this.options.keepaliveTime, {
      port: "--agent-port",
      clientCa: "--cluster-ca-cert",
      cert: "--cluster-cert",
      front: false,
    });
    serveGrpc(server, {
      [AGENT_CONNECT_METHOD]: (call) =>
        handleAgentCall(call, {
          serverId: this.serverId,
          serverCount: this.options.serverCount,
          relay: this.relay,
          metrics: this.metrics,
          logger: this.log,
          agentIdentity: effectiveAgentIdentity(this.options),
          agentIdentityNamespaces: this.options.agentIdentityNamespaces,
          ...(this.tokenReview ? { authenticate: this.tokenAuthenticator(this.tokenReview) } : {}),
        }),
    });
    return server;
  }

  private tokenAuthenticator(review: TokenReviewFn): (authorization: string[]) => Promise<string> {
    const o = this.options;
    return (authorization) =>
      authenticateAgentToken(authorization, {
        agentNamespace: o.agentNamespace,
        agentServiceAccount: o.agentServiceAccount,
        authenticationAudience: o.authenticationAudience,
        review,
      });
  }

  private createGrpcFront(
    door: FrontDoor,
    material: tls.SecureContextOptions | undefined,
    side: TicketSide,
  ): net.Server {
    let server: http2.Http2SecureServer | http2.Http2Server;
    const secure = door.transport === "tcp" && material !== undefined;
    if (secure) {
      const options = { ...this.secureServerOptions(material), ...this.resumptionOptions(ticketDoor(door), side) };
      const tlsServer = http2.createSecureServer(options);
      this.tlsListeners.push({ server: tlsServer, role: "front", options });
      this.checkResumption(tlsServer, door.flag.replace(/^--/, ""), true);
      server = tlsServer;
    } else server = http2.createServer(TUNNEL_HTTP2_OPTIONS);
    this.watchHttp2(server, "proxy", this.options.frontendKeepaliveTime, secure ? frontTls(door) : undefined);
    const log = this.log.child({ door: door.flag });
    serveGrpc(server, {
      [PROXY_METHOD]: (call) => {
        if (call.closed) return;
        this.metrics.grpcStreamOpened("Proxy");
        call.once("close", (status) => {
          this.metrics.grpcStreamClosed("Proxy");
          if (status.code !== GrpcStatus.OK) this.metrics.streamErrorNoPacket("from_client", status.code);
        });
        new ProxyStream(call, this.relay, this.metrics, log);
      },
    });
    return server;
  }

  private createConnectFront(
    door: FrontDoor,
    material: tls.SecureContextOptions | undefined,
    side: TicketSide,
  ): net.Server {
    const log = this.log.child({ door: door.flag });
    const accept = (socket: net.Socket): void => {
      // The 200 (or error) answer is one small write the client waits for: no Nagle delay.
      socket.setNoDelay(true);
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
      if (this.life.closed) {
        socket.destroy();
        return;
      }
      new ConnectDoorClient(socket, this.payloads, this.metrics, log, {
        plain: door.transport === "uds" || door.plain,
        headTimeoutMs: this.options.httpConnectHeaderTimeout,
        onTlsOnPlainPort: () => {
          const port = door.flag.replace(/^--/, "");
          this.metrics.connectionsRefused.inc({ port, reason: "tls_on_plain_port" });
          this.admissionLog.refused(door.flag, "tls_on_plain_port", { remote: socket.remoteAddress });
        },
      });
    };
    if (door.transport === "tcp" && !door.plain && material) {
      const options: tls.TlsOptions = {
        ...material,
        requestCert: true,
        rejectUnauthorized: true,
        ALPNProtocols: ["http/1.1"],
        ...this.tlsProfile,
        ...this.resumptionOptions(ticketDoor(door), side),
        handshakeTimeout: this.options.handshakeTimeout,
      };
      const server = tls.createServer(options);
      this.tlsListeners.push({ server, role: "front", options });
      this.checkResumption(server, door.flag.replace(/^--/, ""), true);
      server.on("secureConnection", accept);
      const portTls = frontTls(door);
      server.on("tlsClientError", (err, socket) => this.handshakeFailures.failed(err, socket, portTls));
      return server;
    }
    const server = net.createServer(accept);
    return server;
  }

  private async listenDoor(door: FrontDoor, material: tls.SecureContextOptions | undefined): Promise<void> {
    const create = (side: TicketSide): net.Server =>
      door.protocol === "grpc"
        ? this.createGrpcFront(door, material, side)
        : this.createConnectFront(door, material, side);
    const server = create("primary");
    if (door.transport === "tcp") {
      const name = ticketDoor(door);
      if (this.ticketKeys && server instanceof tls.Server) {
        const twin = create("twin");
        if (twin instanceof tls.Server) this.ticketKeys.register(name, server, twin);
      }
      await this.listenTcp(server, "front", door.port, door.host, door.flag, door, name);
      return;
    }
    if (this.options.deleteExistingUdsFile) {
      try {
        await unlink(door.path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
          throw new ConfigError(`${door.flag}: cannot remove stale socket "${door.path}": ${errorMessage(err)}`, {
            cause: err,
          });
        }
      }
    }
    await this.listenOn(server, { path: door.path }, `${door.flag}: cannot listen on "${door.path}"`);
    await chmod(door.path, 0o770).catch(() => undefined);
    this.listeners.push({ server, door, role: "front" });
  }

  private async listenTcp(
    server: net.Server,
    role: Listener["role"],
    port: number,
    host: string,
    flag: string,
    door?: FrontDoor,
    ticketDoorName?: string,
  ): Promise<void> {
    const where = `${host === "" ? "*" : host}:${port}`;
    const keys = ticketDoorName !== undefined ? this.ticketKeys : undefined;
    const tickets =
      keys && ticketDoorName !== undefined
        ? { route: keys.route(ticketDoorName), resumable: keys.resumable(ticketDoorName) }
        : undefined;
    const pacer = server instanceof tls.Server ? this.pace(server, flag, tickets) : undefined;
    const listening = pacer?.server ?? server;
    const keepalive = this.options.tcpKeepalive;
    // The pacer sets keepalive on the connections it accepts; plain TCP ports here.
    if (!pacer && keepalive > 0 && (role === "agent" || role === "front"))
      listening.on("connection", (socket: net.Socket) => socket.setKeepAlive(true, keepalive));
    await this.listenOn(listening, host === "" ? { port } : { port, host }, `${flag}: cannot listen on ${where}`);
    this.listeners.push({ server: listening, role, ...(door ? { door } : {}), ...(pacer ? { pacer } : {}) });
  }

  /** A handshake pacer in front of a TLS port (see handshake-pacer.ts). */
  private pace(
    server: tls.Server,
    flag: string,
    tickets?: { route: (ticket: Buffer) => tls.Server | undefined; resumable: (ticket: Buffer) => boolean },
  ): HandshakePacer {
    const port = flag.replace(/^--/, "");
    // One warning per 10 s at most while shedding, with the count since the last one.
    let loggedAt = -Infinity;
    let unlogged = 0;
    const o = this.options;
    return new HandshakePacer(server, {
      maxConcurrent: o.maxConcurrentHandshakes,
      maxPending: o.maxPendingHandshakes,
      maxPerSource: o.maxHandshakesPerSource,
      maxAwaitingHello: o.maxConnectionsAwaitingHello,
      helloTimeoutMs: o.clientHelloTimeout,
      tcpKeepaliveMs: o.tcpKeepalive,
      httpAnswer: plainHttpOnTlsPortResponse(flag),
      clock: this.clock,
      // Without the door's ticket keys no ticket resumes: each handshake costs a full slot.
      ...(tickets ?? {}),
      onDrop: (socket, reason, detail) => {
        this.metrics.connectionsRefused.inc({ port, reason });
        this.admissionLog.refused(flag, reason, {
          remote: socket.remoteAddress,
          ...(detail ? { detail } : {}),
        });
      },
      onShed: () => {
        this.metrics.handshakesShed.inc({ port });
        unlogged++;
        if (Date.now() - loggedAt < 10_000) return;
        loggedAt = Date.now();
        this.log.warn(
          { port: flag, shed: unlogged, limit: this.options.maxPendingHandshakes },
          "overloaded: shedding new connections (--max-pending-handshakes connections already wait for their TLS handshake)",
        );
        unlogged = 0;
      },
    });
  }

  private listenOn(server: net.Server, options: net.ListenOptions, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(new ConfigError(`${what}: ${err.message}`, { cause: err }));
      server.once("error", onError);
      server.on("connection", (socket: net.Socket) => {
        this.accepted.add(socket);
        socket.once("close", () => this.accepted.delete(socket));
      });
      server.listen(options, () => {
        server.off("error", onError);
        server.on("error", (err) => this.log.error({ err: err.message }, "listener error"));
        resolve();
      });
    });
  }

  /** Bound addresses (ports resolved). */
  addresses(): ServerAddresses {
    const out: ServerAddresses = {};
    for (const l of this.listeners) {
      const addr = l.server.address();
      if (addr === null) continue;
      if (l.role === "agent" && typeof addr !== "string") out.agent = addr;
      else if (l.role === "agent-upgrade" && typeof addr !== "string") out.agentUpgrade = addr;
      else if (l.role === "health" && typeof addr !== "string") out.health = addr;
      else if (l.role === "admin" && typeof addr !== "string") out.admin = addr;
      else if (l.role === "front" && l.door) {
        const door = l.door;
        const value = door.transport === "uds" ? door.path : addr;
        const put = (main: "server" | "httpConnect", udsKey: "serverUds" | "httpConnectUds"): void => {
          if (door.transport === "uds" && out[main] !== undefined) out[udsKey] = door.path;
          else out[main] = value;
        };
        const onServerPort = door.flag === "--server-port" || door.flag === "--uds-name";
        if (onServerPort) put("server", "serverUds");
        if (door.protocol === "http-connect") put("httpConnect", "httpConnectUds");
      }
    }
    return out;
  }

  /**
   * The graceful part of a stop (the first SIGTERM): `/readyz` answers not ready; every HTTP/2
   * session, on the gRPC front doors and the agent port, gets GOAWAY naming the last stream it
   * runs (those streams go on; clients open their next ones elsewhere, our agents connect to
   * another replica; a Go agent drops the connection at its next --probe-interval, as after a Go
   * server's graceful stop); sessions opened later get GOAWAY at once; new dials are refused with
   * {@link DialErrors.serverDraining} (a DIAL_RSP error; 503 on the CONNECT door). Dials pending and
   * tunnels open get --graceful-shutdown-timeout to finish. Resolves true when none is left, false
   * when the timeout (or close()) cut the wait. The ports stay open until close().
   */
  drain(): Promise<boolean> {
    return this.life.drain(() => this.runDrain());
  }

  private async runDrain(): Promise<boolean> {
    // Dials that wait for an agent fail now (as draining: the client dials again elsewhere).
    this.relay.releaseWaiting();
    // --shutdown-delay: not ready, everything else as before, while the Service (which may still
    // send new connections here for a moment) catches up; clients that do not retry (Go's) lose
    // nothing then. A second signal (close()) ends the wait.
    const delayMs = this.options.shutdownDelay;
    if (delayMs > 0) {
      this.log.info({ delayMs }, "proxy server leaving: not ready, still serving for --shutdown-delay");
      await new Promise<void>((resolve) => {
        const timer = this.clock.setTimeout(resolve, delayMs);
        this.cutDelay = () => {
          this.clock.clearTimeout(timer);
          resolve();
        };
      });
      this.cutDelay = undefined;
    }
    this.goingAway = true;
    this.relay.startDraining();
    for (const s of this.sessions) if (!s.closed && !s.destroyed) s.close();
    const timeoutMs = this.options.gracefulShutdownTimeout;
    this.log.info(
      {
        sessions: this.sessions.size,
        established: this.relay.establishedCount(),
        pending: this.relay.pendingCount(),
        timeoutMs,
      },
      "proxy server draining: not ready, GOAWAY on every session, new dials refused",
    );
    if (this.relay.idle()) return true;
    if (timeoutMs <= 0) return false;
    const cut = new Promise<boolean>((resolve) => (this.cutDrain = () => resolve(false)));
    const idle = await Promise.race([this.relay.whenIdle(timeoutMs), cut]);
    this.cutDrain = undefined;
    if (idle) this.log.info({}, "proxy server drained: no tunnel left");
    else
      this.log.warn(
        { established: this.relay.establishedCount(), pending: this.relay.pendingCount(), timeoutMs },
        "drain over with tunnels still open: closing them",
      );
    return idle;
  }

  /**
   * Stop: {@link drain} first when nothing drained yet (so a close() alone waits up to
   * --graceful-shutdown-timeout as before), or cut a drain in progress short (the second
   * signal); then stop accepting, fail pending dials, and close every stream and socket.
   */
  close(): Promise<void> {
    const cut = this.life.draining;
    const drained = this.life.started ? this.drain() : undefined;
    return this.life.close(() => this.shutdown(cut, drained));
  }

  private async shutdown(cut: boolean, drained: Promise<boolean> | undefined): Promise<void> {
    if (cut) {
      this.cutDelay?.();
      this.cutDrain?.();
    }
    await drained;
    this.log.info({}, "proxy server shutting down");
    this.certReloading?.stop();
    this.ticketKeys?.stop();
    const closed = this.listeners.map((l) => new Promise<void>((resolve) => l.server.close(() => resolve())));
    this.relay.stopDialing();
    for (const b of [...this.relay.backends]) {
      b.call.finish({ code: GrpcStatus.UNAVAILABLE, details: "proxy server shutting down" });
      this.relay.removeBackend(b, "proxy server shutting down");
    }
    for (const l of this.listeners) l.pacer?.dropWaiting();
    for (const s of this.sessions) s.destroy();
    for (const s of this.sockets) s.destroy();
    for (const l of this.listeners) {
      if (l.server instanceof http.Server) l.server.closeAllConnections();
    }
    for (const s of this.accepted) s.destroy();
    await Promise.all(closed);
    this.listeners.length = 0;
  }

  private async closeListeners(): Promise<void> {
    this.certReloading?.stop();
    this.ticketKeys?.stop();
    await Promise.all(
      this.listeners.map(
        (l) =>
          new Promise<void>((resolve) => {
            if (l.server instanceof http.Server) l.server.closeAllConnections();
            l.server.close(() => resolve());
          }),
      ),
    );
    this.listeners.length = 0;
  }
}
