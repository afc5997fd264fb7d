/**
 * The proxy-agent's wiring: picks the server targets from the options and hands them to the connect
 * loop, opens each tunnel, serves the servers' dials, drains, exposes health and metrics.
 * Design: docs/design/protocol.md#23-server-count-and-ha-behind-a-load-balancer
 */
import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { agentAlpnProtocols, ConfigError, type AgentOptions } from "@cluster-proxy/api";
import { AGENT_CONNECT_METHOD, FLOW_CONTROL_METADATA, Metadata } from "@cluster-proxy/protocol";
import {
  AGENT_TLS_FLAGS,
  CertReloader,
  certificateInfo,
  ConnectError,
  earliestExpiry,
  connectSession,
  SecureContextCache,
  TlsSessionCache,
  keepSessionAlive,
  openCall,
  type ClientCall,
  type HttpProxy,
} from "@cluster-proxy/tunnel";
import { errorMessage } from "@cluster-proxy/errors";
import {
  InFlight,
  keepAliveClock,
  Lifecycle,
  silentLogger,
  type Clock,
  type Component,
  type Logger,
} from "@cluster-proxy/kit";
import {
  closeEndpointServer,
  createEndpointServer,
  listenEndpointServer,
  type EndpointListener,
} from "@cluster-proxy/kit/endpoints";
import { adminPortEndpoints, healthPortEndpoints } from "@cluster-proxy/kit/process";
import {
  agentIdentifiersHeader,
  agentTlsFiles,
  loadAgentTls,
  loadDestinationPolicy,
  readAuthorization,
  resolveAgentID,
  resolveHubProxy,
  type AgentTlsMaterial,
} from "./agent-config.js";
import { guardedConnector } from "./destination/destination-guard.js";
import { loadGatewaySettings } from "./gateway-endpoint/gateway-config.js";
import type { GatewayEndpoint } from "./gateway-endpoint/gateway-endpoint.js";
import { HubAccess } from "./connect/hub-tunnel.js";
import { ConnectLoop, type AttemptResult } from "./connect/connect-loop.js";
import { BalancedServerTargets, type ServerTarget, type ServerTargets } from "./connect/server-targets.js";
import { ReplicaServerTargets } from "./connect/replica-targets.js";
import { defaultConnector, type SocketConnector } from "./destination/endpoint-dialer.js";
import { connectionCondition } from "./connect/connection-report.js";
import { agentReadiness } from "./readiness.js";
import { AgentMetrics } from "./metrics.js";
import { ServerTunnel } from "./tunnel/server-tunnel.js";
import { StatusPublisher, type PatchSender } from "./status-publisher.js";

/** What {@link ProxyAgent.start} started as: the fields of the component's one start-up line. */
export interface AgentStarted {
  agentID: string;
  /** The identifiers the agent announces (`host=...&cidr=...`), empty when none. */
  identifiers: string;
  /** `--proxy-server-host:--proxy-server-port`. */
  server: string;
  /** How the agent reaches the servers, when not directly. */
  through?: string;
  /** The destination policy in one line. */
  destinationPolicy: string;
  gatewayEndpoint: "enabled" | "disabled";
}

/** Optional collaborators of a {@link ProxyAgent}. */
export interface ProxyAgentDeps {
  logger?: Logger;
  /** Random source in [0, 1) for jitter (inject for deterministic tests). */
  random?: () => number;
  /** Opens endpoint sockets (tests inject one to simulate dials that hang). */
  connectEndpoint?: SocketConnector;
  /** Sends the `--status-deployment` patch (tests inject one; the pod's service account otherwise). */
  sendStatus?: PatchSender;
  /**
   * The agent's timers: the connect loop's, the drain's grace period and the status writes'
   * (default: the kit's keepAliveClock, whose waits keep the process alive).
   */
  clock?: Clock;
}

/** The server's answer to Connect: its identity and how many servers there are. */
export interface ServerHandshake {
  serverID: string;
  serverCount: number;
}

/**
 * Read `serverid` (exactly one, non-empty) and `servercount` (an integer) from Connect's
 * response headers, or throw a {@link ConnectError} saying why they are unusable (including a
 * trailers-only refusal).
 */
export function parseServerHandshake(
  headers: Readonly<Record<string, string | string[] | number | undefined>>,
): ServerHandshake {
  const grpcStatus = headers["grpc-status"];
  if (grpcStatus !== undefined && grpcStatus !== "0") {
    const msg = decodeURIComponent(String(headers["grpc-message"] ?? ""));
    throw new ConnectError(`server refused the stream: ${msg || "no message"} (gRPC status ${String(grpcStatus)})`);
  }
  const httpStatus = Number(headers[":status"]);
  if (httpStatus !== 200) throw new ConnectError(`server answered HTTP ${httpStatus}`);
  const id = headers[Metadata.serverID];
  if (typeof id !== "string" || id === "" || id.includes(", ")) {
    throw new ConnectError(
      `expected exactly one ${Metadata.serverID} response header, got ${JSON.stringify(id ?? null)}`,
    );
  }
  const count = headers[Metadata.serverCount];
  if (typeof count !== "string" || !/^[+-]?\d+$/.test(count)) {
    throw new ConnectError(
      `expected one integer ${Metadata.serverCount} response header, got ${JSON.stringify(count ?? null)}`,
    );
  }
  return { serverID: id, serverCount: Number(count) };
}

/**
 * A konnectivity-compatible proxy-agent: a kit {@link Component} (start, drain and close each run
 * once). It takes its options validated (`validateAgentOptions`); the constructor does no I/O, the
 * files are read in start().
 */
export class ProxyAgent implements Component<AgentStarted> {
  /** The `agentid` this agent announces. */
  readonly agentID: string;
  /** The `agentidentifiers` header value this agent announces. */
  readonly identifiers: string;
  readonly metrics = new AgentMetrics();
  private readonly log: Logger;
  private readonly random: () => number;
  private readonly tunnels = new Map<string, ServerTunnel>();
  /** Where tunnels go: the load-balanced address, or (--hub-kubeconfig) each ready replica. */
  private targets: ServerTargets = new BalancedServerTargets(() => this.tunnels.values());
  private loop: ConnectLoop | undefined;
  private tlsMaterial: AgentTlsMaterial | undefined;
  /** The forward proxy to the proxy server (HTTPS_PROXY), if any. */
  private hubProxy: HttpProxy | undefined;
  private certReloader: CertReloader | undefined;
  /**
   * TLS sessions of the proxy-servers (TLS 1.3 resumption): a reconnect after a drop or a hub
   * restart skips the certificate exchange. Cleared when the certificate files are reloaded.
   */
  private readonly tlsSessions = new TlsSessionCache(16);
  /** The TLS context of the agent's one identity (a reload makes a new one). */
  private readonly tlsContexts = new SecureContextCache(1);
  /** The in-process gateway endpoint (--gateway-ca-file), if enabled. */
  private gateway: GatewayEndpoint | undefined;
  /** Opens endpoint sockets: the injected connector, wrapped by the destination policy if any. */
  private connectEndpoint: SocketConnector | undefined;
  private attempt: AbortController | undefined;
  private readonly lifecycle = new Lifecycle<AgentStarted>("proxy-agent");
  /** Aborted when close() begins: cuts a drain's wait. */
  private readonly closing = new AbortController();
  private readonly clock: Clock;
  /** Endpoint connections (dialling or open) of every tunnel: what a drain waits for. */
  private readonly endpoints: InFlight;
  private health: EndpointListener | undefined;
  /** Writes the connection state into the agent's Deployment (--status-deployment). */
  private status: StatusPublisher | undefined;
  private lastConnectError: string | undefined;
  private admin: EndpointListener | undefined;
  /** --hub-kubeconfig: tunnels go through the hub kube-apiserver, one per ready proxy-server pod. */
  private replicas: ReplicaServerTargets | undefined;

  /**
   * @param options validated, every default applied (`validateAgentOptions`); not checked again
   *   here, and no file is read before start().
   */
  constructor(
    readonly options: AgentOptions,
    private readonly deps: ProxyAgentDeps = {},
  ) {
    this.log = (deps.logger ?? silentLogger).child({ component: "proxy-agent" });
    this.random = deps.random ?? Math.random;
    this.clock = deps.clock ?? keepAliveClock;
    this.endpoints = new InFlight(this.clock, (count) => this.metrics.openEndpointConnections.set(count));
    this.agentID = resolveAgentID(options);
    this.identifiers = agentIdentifiersHeader(options);
  }

  /**
   * Load the TLS and other files, open the health/admin ports and start the connect loop (once: a
   * second call gets the first one's promise). Resolves once listening (not once connected) with
   * what it started as, for the one start-up line its runner logs; rejects with a ConfigError (a
   * TlsFileError for a TLS file) naming the flag, and after close().
   */
  start(): Promise<AgentStarted> {
    return this.lifecycle.start(() => this.open());
  }

  private async open(): Promise<AgentStarted> {
    this.tlsMaterial = await loadAgentTls(this.options);
    this.hubProxy = await resolveHubProxy(this.options);
    if (this.options.hubKubeconfig) {
      const access = new HubAccess(this.options.hubKubeconfig);
      await access.load();
      this.replicas = this.replicaTargets(access);
      this.targets = this.replicas;
    }
    this.startCertReloading(this.tlsMaterial);
    await readAuthorization(this.options);
    const policy = await loadDestinationPolicy(this.options);
    const gateway = await loadGatewaySettings(this.options);
    if (gateway && this.tlsMaterial.cert && this.tlsMaterial.key) {
      // Loaded only when enabled: every managed cluster runs an agent, its idle memory counts.
      const [{ GatewayEndpoint }, { ClusterUpstreams }] = await Promise.all([
        import("./gateway-endpoint/gateway-endpoint.js"),
        import("./gateway-endpoint/gateway-upstreams.js"),
      ]);
      this.gateway = new GatewayEndpoint({
        material: { cert: this.tlsMaterial.cert, key: this.tlsMaterial.key, ca: gateway.gatewayCa },
        files: gateway.files,
        reloadIntervalMs: this.options.certReloadInterval,
        // Service dials are judged by the same destination policy as the tunnel's, after resolution.
        upstreams: new ClusterUpstreams({ ...gateway.upstreams, destinationPolicy: policy }),
        logger: this.log,
        connectTimeoutMs: this.options.dialTimeout,
        impersonationPrefix: gateway.impersonationPrefix,
      });
    }
    this.connectEndpoint = policy.isOpen
      ? this.deps.connectEndpoint
      : guardedConnector(policy, this.deps.connectEndpoint ?? defaultConnector, (message) =>
          this.log.warn({ error: message }, "dial refused by the destination policy"),
        );
    const o = this.options;
    try {
      if (o.healthServerPort > 0) {
        this.health = await listenEndpointServer(
          createEndpointServer(
            healthPortEndpoints({
              registry: this.metrics.registry,
              readiness: (verbose) => agentReadiness(this.connectedServers(), verbose),
            }),
          ),
          { host: o.healthServerHost, port: o.healthServerPort, flag: "--health-server-port" },
          (message, cause) => new ConfigError(message, { cause }),
        );
      }
      if (o.adminServerPort > 0) {
        this.admin = await listenEndpointServer(
          createEndpointServer(adminPortEndpoints(this.metrics.registry, o.enableProfiling === true)),
          { host: o.adminBindAddress, port: o.adminServerPort, flag: "--admin-server-port" },
          (message, cause) => new ConfigError(message, { cause }),
        );
      }
    } catch (err) {
      await this.close();
      throw err;
    }
    const describe = (): AgentStarted => ({
      agentID: this.agentID,
      identifiers: this.identifiers,
      server: `${o.proxyServerHost}:${o.proxyServerPort}`,
      ...(this.replicas
        ? { through: `hub kube-apiserver, pods of ${o.proxyServerNamespace}/${o.proxyServerService}` }
        : {}),
      ...(this.hubProxy ? { through: `${this.hubProxy.url.protocol}//${this.hubProxy.url.host}` } : {}),
      destinationPolicy: policy.describe(),
      gatewayEndpoint: this.gateway ? "enabled" : "disabled",
    });
    if (this.lifecycle.closed) {
      // close() ran while the files were read or the ports opened: nothing is left running.
      await this.release();
      return describe();
    }
    if (o.statusDeployment) {
      const [namespace, deployment] = o.statusDeployment.split("/") as [string, string];
      this.status = new StatusPublisher({
        namespace,
        deployment,
        logger: this.log,
        ...(this.deps.sendStatus ? { send: this.deps.sendStatus } : {}),
        clock: this.clock,
      });
    }
    this.replicas?.start();
    this.loop = new ConnectLoop({
      targets: this.targets,
      attempt: () => this.connectOnce(),
      syncIntervalMs: o.syncInterval,
      syncIntervalCapMs: o.syncIntervalCap,
      random: this.random,
      clock: this.clock,
      onFailure: ({ err, retryInMs, failures, shedding }) => {
        this.lastConnectError = errorMessage(err);
        this.reportStatus();
        this.log.warn(
          {
            err: this.lastConnectError,
            retryInMs,
            failures,
            ...(shedding ? { overloaded: true } : {}),
          },
          shedding
            ? "proxy server is overloaded (it shed this connection): backing off"
            : "cannot connect to proxy server",
        );
      },
    });
    this.loop.start();
    return describe();
  }

  /**
   * The graceful part of a stop (the first SIGTERM), once: send DRAIN on every server stream (idle
   * ones too), GOAWAY on every gateway endpoint session and stop opening server connections, then
   * wait up to --drain-grace-period for the open endpoint connections to end (existing traffic
   * keeps flowing meanwhile). Resolves false when the period ran out or close() cut the wait.
   */
  drain(): Promise<boolean> {
    return this.lifecycle.drain(async () => {
      this.stopTakingWork();
      const grace = this.options.drainGracePeriod;
      const cut = new Promise<false>((resolve) =>
        this.closing.signal.addEventListener("abort", () => resolve(false), { once: true }),
      );
      const idle = await Promise.race([this.endpoints.whenIdle(grace), cut]);
      // close() ends the connections itself: an agent idle because it closed was cut, not drained.
      if (idle && !this.closing.signal.aborted) return true;
      if (!this.closing.signal.aborted) {
        this.log.warn({ gracePeriodMs: grace }, "grace period over, closing open connections");
      }
      return false;
    });
  }

  /** The immediate part of a drain: no new server connections, DRAIN and GOAWAY sent. */
  private stopTakingWork(): void {
    this.loop?.stop();
    for (const tunnel of this.tunnels.values()) tunnel.drain();
    this.gateway?.drain();
    this.log.info({ servers: this.tunnels.size }, "draining: no new server connections");
  }

  /**
   * Close everything, once (after a drain, or at once: it cuts a drain in progress): endpoint
   * sockets, streams, sessions, the pending attempt and the ports.
   */
  close(): Promise<void> {
    return this.lifecycle.close(() => {
      this.closing.abort();
      return this.release();
    });
  }

  /** Stop and release what runs now (again for what a start running during close() opened). */
  private async release(): Promise<void> {
    this.certReloader?.stop();
    this.gateway?.close();
    this.status?.close();
    this.replicas?.stop();
    this.loop?.stop();
    this.attempt?.abort();
    // In-band: each open connection's client hears of its end from our CLOSE_RSP even if the
    // transport's close never reaches the server.
    const shutdowns = [...this.tunnels.values()].map((tunnel) => tunnel.shutdown("agent shutting down"));
    const servers = [this.health?.server, this.admin?.server].filter((s): s is http.Server => s !== undefined);
    this.health = undefined;
    this.admin = undefined;
    await Promise.all([...shutdowns, ...servers.map((s) => closeEndpointServer(s))]);
  }

  /** serverIDs currently connected. */
  connectedServers(): string[] {
    return [...this.tunnels.keys()];
  }

  /** Bound addresses of the health and admin ports (absent when disabled or closed). */
  addresses(): { health?: AddressInfo; admin?: AddressInfo } {
    return { health: this.health?.address, admin: this.admin?.address };
  }

  /** Number of endpoint connections (open or dialling). */
  get openEndpointConnections(): number {
    return this.endpoints.count;
  }

  /** The PortForward targets (--hub-kubeconfig): one tunnel to each ready proxy-server pod. */
  private replicaTargets(access: HubAccess): ReplicaServerTargets {
    const o = this.options;
    return new ReplicaServerTargets({
      access,
      namespace: o.proxyServerNamespace,
      service: o.proxyServerService,
      port: o.proxyServerPort,
      timeoutMs: Math.max(o.keepaliveTimeout, o.dialTimeout),
      retryMs: o.syncIntervalCap,
      logger: this.log,
      onChange: (pods) => {
        this.metrics.knownServerCount.set(this.targets.knownServerCount);
        this.log.info({ replicas: pods }, "ready proxy-server replicas changed");
        this.reportStatus();
        if (this.targets.wantsAnother()) this.loop?.poke();
      },
      onError: (message) => {
        if (message) this.reportStatus();
      },
    });
  }

  /**
   * Keep {@link tlsMaterial} in step with the files: polled every --cert-reload-interval and at
   * each connection attempt. New material is used by the next attempt; open tunnels keep theirs.
   */
  private startCertReloading(initial: AgentTlsMaterial): void {
    const o = this.options;
    const files = agentTlsFiles(o);
    const setExpiry = (material: { cert?: Buffer; ca?: Buffer } | undefined): void => {
      const leaf = certificateInfo(material?.cert)?.notAfter;
      const ca = earliestExpiry(material?.ca);
      if (leaf) this.metrics.certificateExpiry.set({ flag: "--agent-cert" }, leaf.getTime() / 1000);
      if (ca) this.metrics.certificateExpiry.set({ flag: "--ca-cert" }, ca.getTime() / 1000);
    };
    setExpiry(initial);
    this.certReloader = new CertReloader({
      what: "agent",
      files,
      intervalMs: o.certReloadInterval,
      initial,
      apply: (material) => {
        this.tlsMaterial = { ca: material.ca ?? initial.ca, cert: material.cert, key: material.key };
        // Sessions of the old certificate are never resumed with the new one.
        this.tlsSessions.clear();
      },
      onResult: (result, material) => {
        this.metrics.certificateReloads.inc({ result });
        if (result === "success") setExpiry(material);
      },
      logger: this.log,
    });
    this.certReloader.start();
  }

  /** One connect attempt: fresh session, Connect stream, handshake headers. */
  private async connectOnce(): Promise<AttemptResult> {
    const o = this.options;
    // Re-read the files per attempt so rotated certificates are picked up at once; a bad set is
    // refused (logged, counted) and the last good one is used.
    await this.certReloader?.check();
    if (this.lifecycle.closed) return "closed";
    const material = this.tlsMaterial;
    if (!material) throw new ConnectError("no TLS material loaded");
    const authorization = await readAuthorization(o);
    if (this.lifecycle.closed) return "closed";
    const attempt = new AbortController();
    this.attempt = attempt;
    this.log.debug({ server: `${o.proxyServerHost}:${o.proxyServerPort}` }, "connecting to proxy server");
    const timeoutMs = Math.max(o.keepaliveTimeout, o.dialTimeout);
    const handshakeTimeoutMs = o.handshakeTimeout;
    let session: http2.ClientHttp2Session | undefined;
    try {
      const target = this.targets.pick();
      if (target === undefined) return "closed";
      const throughHub: { socket: Socket } | undefined = target.open
        ? { socket: await target.open(attempt.signal) }
        : undefined;
      session = await connectSession({
        ...(throughHub ?? {}),
        host: o.proxyServerHost,
        port: o.proxyServerPort,
        tls: {
          ca: material.ca,
          cert: material.cert,
          key: material.key,
          ALPNProtocols: agentAlpnProtocols(o.alpnProto),
        },
        timeoutMs,
        handshakeTimeoutMs,
        tcpKeepaliveMs: o.tcpKeepalive,
        tlsNames: AGENT_TLS_FLAGS,
        signal: attempt.signal,
        sessions: this.tlsSessions,
        contexts: this.tlsContexts,
        ...(this.hubProxy && !throughHub ? { proxy: this.hubProxy } : {}),
      });
      const s = session;
      const onAbort = (): void => void s.destroy();
      attempt.signal.addEventListener("abort", onAbort, { once: true });
      s.once("close", () => attempt.signal.removeEventListener("abort", onAbort));
      keepSessionAlive(s, o.keepaliveTime, o.keepaliveTimeout, (reason) =>
        this.log.warn({ reason }, "proxy server connection is dead"),
      );
      const call = openCall(s, AGENT_CONNECT_METHOD, {
        metadata: {
          [Metadata.agentID]: this.agentID,
          [Metadata.agentIdentifiers]: this.identifiers,
          [FLOW_CONTROL_METADATA]: "1",
          ...(authorization === undefined ? {} : { [Metadata.authorization]: authorization }),
        },
      });
      // Packets may follow the headers in the same read: hold them until the tunnel exists.
      const early: Buffer[] = [];
      const collect = (frame: Buffer): void => void early.push(frame);
      call.on("message", collect);
      const headers = await withTimeout(call.waitForHeaders(), handshakeTimeoutMs, () => s.destroy());
      call.off("message", collect);
      if (this.lifecycle.closed) {
        s.destroy();
        return "closed";
      }
      const { serverID, serverCount } = parseServerHandshake(headers);
      if (this.tunnels.has(serverID)) {
        this.log.info({ serverID }, "duplicate server: closing the extra connection");
        call.abort({ code: 1, details: "duplicate server" });
        s.close();
        return "duplicate";
      }
      this.register(serverID, s, call, serverCount, early, headers[FLOW_CONTROL_METADATA] === "1", target);
      return "connected";
    } catch (err) {
      session?.destroy();
      throw err;
    } finally {
      if (this.attempt === attempt) this.attempt = undefined;
    }
  }

  private register(
    serverID: string,
    session: http2.ClientHttp2Session,
    call: ClientCall,
    count: number,
    early: Buffer[],
    serverFlowControl: boolean,
    target: ServerTarget,
  ): void {
    const { pod } = target;
    const tunnel = new ServerTunnel(serverID, session, call, {
      addressing: { clusterName: this.options.clusterName, apiserverAddress: this.options.apiserverAddress },
      dialTimeoutMs: this.options.dialTimeout,
      tcpKeepaliveMs: this.options.tcpKeepalive,
      connectionStallTimeoutMs: this.options.connectionStallTimeout,
      serverFlowControl,
      metrics: this.metrics,
      logger: this.log,
      beginEndpoint: () => this.endpoints.begin(),
      dialLimits: {
        perTunnel: this.options.maxDialsPerTunnel,
        perAgent: this.options.maxDials,
        agentCount: () => this.endpoints.count,
      },
      connect: this.connectEndpoint,
      ...(this.gateway ? { gateway: this.gateway } : {}),
    });
    this.tunnels.set(serverID, tunnel);
    this.targets.opened(serverID, target, count);
    this.metrics.knownServerCount.set(this.targets.knownServerCount);
    this.metrics.openServerConnections.set(this.tunnels.size);
    this.log.info(
      { serverID, serverCount: count, connected: this.tunnels.size, ...(pod ? { pod } : {}) },
      "connected to proxy server",
    );
    this.reportStatus();
    tunnel.once("close", (reason) => {
      if (this.tunnels.get(serverID) === tunnel) {
        this.tunnels.delete(serverID);
        this.targets.closed(serverID);
      }
      this.metrics.openServerConnections.set(this.tunnels.size);
      this.log.info({ serverID, reason, connected: this.tunnels.size }, "disconnected from proxy server");
      this.reportStatus();
      if (!this.lifecycle.stopping) this.loop?.lost();
    });
    // A draining server (GOAWAY) keeps its open connections; another replica is wanted at once.
    tunnel.once("goaway", () => {
      if (!this.lifecycle.stopping) this.loop?.poke();
    });
    for (const frame of early) tunnel.receive(frame);
    if (call.closed || session.destroyed) tunnel.close("stream ended during the handshake");
    else if (this.lifecycle.stopping) tunnel.drain();
  }

  /** Publish the connection state (--status-deployment); only changes are written. */
  private reportStatus(): void {
    if (!this.status) return;
    // An error from before the agent reached every server is history, not a reason.
    if (this.tunnels.size >= this.targets.knownServerCount) this.lastConnectError = undefined;
    this.status.publish(
      connectionCondition({
        agent: this.agentID,
        connected: this.tunnels.size,
        known: this.targets.knownServerCount,
        ...(this.replicas ? { path: "through the hub kube-apiserver (entrypoint PortForward)" } : {}),
        ...(this.replicas?.error || this.lastConnectError
          ? { lastError: this.replicas?.error ?? this.lastConnectError }
          : {}),
      }),
    );
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => void): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout();
      reject(new ConnectError(`no response headers from the proxy server within ${ms} ms`));
    }, ms);
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
