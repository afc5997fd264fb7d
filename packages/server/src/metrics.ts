/**
 * Server metrics, named like konnectivity's (`konnectivity_network_proxy_server_*`) where the
 * concept matches so existing dashboards work, plus per-cluster series of our own
 * (`cluster_proxy_server_*`). Each server owns its Registry (several servers can share a process).
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { PacketCounts, grpcCodeName } from "@cluster-proxy/tunnel";

const PREFIX = "konnectivity_network_proxy_server_";

/** The Go server's latency buckets (1 µs to 12.5 s). */
export const GO_SERVER_LATENCY_BUCKETS = [0.000001, 0.00001, 0.0001, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5];

/** Stream segments (konnectivity label values). */
export type Segment = "from_client" | "to_client" | "from_agent" | "to_agent";

/** Why a dial through the server failed: the `reason` labels of konnectivity's `dial_failure_count`. */
export type ServerDialFailureReason =
  | "no_agent"
  | "error_response"
  | "unrecognized_response"
  | "send_rsp"
  | "backend_close"
  | "backend_dial_timeout"
  | "frontend_close"
  | "agent_gone"
  | "draining";
const SEGMENTS: readonly Segment[] = ["from_client", "to_client", "from_agent", "to_agent"];

/** Live values the gauges read at scrape time. */
export interface MetricsSource {
  readyBackends(): { strategy: string; count: number }[];
  pendingDials(): number;
  /** Dials waiting for an agent of their address to connect (a new server's warm-up). */
  dialsWaitingForAgent(): number;
  establishedConnections(): number;
  /** Agent streams connected. */
  backendCount(): number;
  /** Agent streams per `host` identifier. */
  backendsByIdentifier(): Map<string, number>;
  /** Connections waiting for their TLS handshake, per port flag (without the dashes). */
  handshakesWaiting(): Map<string, number>;
  /** Connections that have not sent their TLS ClientHello yet, per port flag (without the dashes). */
  awaitingHello(): Map<string, number>;
}

/** A source for metrics of no running server: every gauge reads zero (the metrics reference, tests). */
export const IDLE_METRICS_SOURCE: MetricsSource = {
  readyBackends: () => [],
  pendingDials: () => 0,
  dialsWaitingForAgent: () => 0,
  establishedConnections: () => 0,
  backendCount: () => 0,
  backendsByIdentifier: () => new Map(),
  handshakesWaiting: () => new Map(),
  awaitingHello: () => new Map(),
};

/** A gauge set from `read()` whenever it is scraped. */
function scrapedGauge(registers: Registry[], name: string, help: string, read: () => number): void {
  new Gauge({
    name,
    help,
    registers,
    collect() {
      this.set(read());
    },
  });
}

/** A gauge of one label set from `read()` whenever it is scraped (values no longer read are dropped). */
function scrapedGaugeByLabel(
  registers: Registry[],
  name: string,
  help: string,
  label: string,
  read: () => ReadonlyMap<string, number>,
): void {
  new Gauge({
    name,
    help,
    labelNames: [label],
    registers,
    collect() {
      this.reset();
      for (const [value, count] of read()) this.set({ [label]: value }, count);
    },
  });
}

/** Metric constructors that register in `registers` only (never prom-client's global registry). */
function registeringIn(registers: Registry[]) {
  return {
    counter: <L extends string = string>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> =>
      new Counter({ name, help, labelNames, registers }),
    gauge: <L extends string = string>(name: string, help: string, labelNames: readonly L[] = []): Gauge<L> =>
      new Gauge({ name, help, labelNames, registers }),
    histogram: (name: string, help: string, buckets: number[]): Histogram =>
      new Histogram({ name, help, buckets, registers }),
  };
}

/** The gRPC methods the server serves (`service_method` of `grpc_connections`). */
export type GrpcMethod = "Proxy" | "Connect";

export class ServerMetrics {
  readonly registry = new Registry();
  readonly dialDuration: Histogram;
  /** Time spent handing a packet to a client stream or socket (Go: the blocking gRPC Send). */
  readonly frontendWriteDuration: Histogram;
  /** Failed sends on gRPC streams (Go: stream_errors_total). */
  readonly streamErrors: Counter<"segment" | "code" | "packet_type">;
  /** Open gRPC streams by method, counted in plain numbers ({@link grpcStreamOpened}) and read on scrape. */
  private readonly grpcStreams = new Map<GrpcMethod, number>([
    ["Proxy", 0],
    ["Connect", 0],
  ]);
  readonly httpConnections: Gauge;
  readonly dialFailures: Counter;
  /** Dials sent again to another agent because theirs went away before answering (relay.ts `resend`). */
  readonly dialsResent: Counter;
  /** Dials that found no agent during a new server's warm-up (--warm-up-dial-wait), by how their wait ended. */
  readonly dialsWaitedForAgent: Counter<"result">;
  /** Agents refused because their identifiers exceed what their certificate grants (agent-identity.ts). */
  readonly agentIdentityRefusals: Counter<"reason">;
  /** Agents whose ServiceAccount token was not accepted (token-review.ts). */
  readonly agentAuthFailures: Counter;
  readonly stalledConnections: Counter;
  /** Streams cut because their peer did not read (see the tunnel's SendLimits). */
  readonly streamsCut: Counter<"service_method">;
  /** Connections shed (TLS user_canceled alert) because too many waited for their handshake. */
  readonly handshakesShed: Counter<"port">;
  /** Connections closed before their TLS handshake or request (admission limits, deadlines, wrong protocol). */
  readonly connectionsRefused: Counter<"port" | "reason">;
  /**
   * HTTP/2 sessions closed because a PING went unanswered, by port (`agent`, `proxy`) and why
   * (`keepalive`: the periodic --keepalive-time/--frontend-keepalive-time ping; `idle_probe`: the
   * ping of a session that went quiet, which frees sessions nghttp2 ended with GOAWAY).
   */
  readonly unresponsiveSessions: Counter<"port" | "probe">;
  /** Expiry (Unix seconds) of the certificates in use, by flag (leaf: `--server-cert`, `--cluster-cert`; earliest CA of a bundle: `--server-ca-cert`, `--cluster-ca-cert`). */
  readonly certificateExpiry: Gauge<"flag">;
  /** Certificate reloads by listener (`agent`, `front`) and result (`success`, `failure`). */
  readonly certificateReloads: Counter<"listener" | "result">;
  /**
   * Completed TLS handshakes by port flag and kind: `full`, `resumed` (a session ticket, TLS 1.3
   * resumption), `resumed_refused` (resumed with a client certificate no longer valid: closed, the
   * client's next connection is a full handshake).
   */
  readonly tlsHandshakes: Counter<"port" | "kind">;
  /** Ticket key file reloads by result (success, failure: the file was refused, the keys in use stay). */
  readonly ticketKeyReloads: Counter<"result">;
  /** Packets per (segment, type), handed to `stream_packets_total` when it is scraped. */
  private readonly packetCounts = new PacketCounts(SEGMENTS);

  constructor(source: MetricsSource) {
    const registers = [this.registry];
    const { counter, gauge, histogram } = registeringIn(registers);
    this.dialDuration = histogram(
      `${PREFIX}dial_duration_seconds`,
      "Latency of dial to the remote endpoint in seconds",
      GO_SERVER_LATENCY_BUCKETS,
    );
    this.frontendWriteDuration = histogram(
      `${PREFIX}frontend_write_duration_seconds`,
      "Latency of write to the frontend in seconds",
      GO_SERVER_LATENCY_BUCKETS,
    );
    this.streamErrors = counter(
      `${PREFIX}stream_errors_total`,
      "Count of gRPC stream errors, by segment, grpc Code, packet type.",
      ["segment", "code", "packet_type"],
    );
    scrapedGauge(
      registers,
      `${PREFIX}ready_backend_connections`,
      "Number of konnectivity agent connected to the proxy server. DEPRECATED, please use ready_backends",
      () => source.backendCount(),
    );
    counter(
      `${PREFIX}culled_leases_count`,
      "Count of expired leases that the lease garbage collection controller has culled. Always 0 here: there is no lease controller (--enable-lease-controller is refused)",
    );
    new Gauge({
      name: `${PREFIX}full_receive_channels`,
      help: "Number of current connections blocked by a full receive channel, partitioned by service method. Always 0 here: connections are flow-controlled one by one, none blocks a stream (docs/design/flow-control.md)",
      labelNames: ["service_method"],
      registers,
      collect() {
        this.set({ service_method: "Proxy" }, 0);
        this.set({ service_method: "Connect" }, 0);
      },
    });
    // Counted in plain numbers: prom-client hashes the label set of every inc() and dec(), twice a dial.
    const grpcStreams = this.grpcStreams;
    new Gauge({
      name: `${PREFIX}grpc_connections`,
      help: "Number of current gRPC streams",
      labelNames: ["service_method"],
      registers,
      collect() {
        for (const [method, open] of grpcStreams) this.set({ service_method: method }, open);
      },
    });
    this.httpConnections = gauge(`${PREFIX}http_connections`, "Number of current HTTP CONNECT connections");
    new Gauge({
      name: `${PREFIX}ready_backends`,
      help: "Number of agent streams each proxy strategy can route to",
      labelNames: ["proxy_strategy"],
      registers,
      collect() {
        for (const { strategy, count } of source.readyBackends()) this.set({ proxy_strategy: strategy }, count);
      },
    });
    scrapedGauge(registers, `${PREFIX}pending_backend_dials`, "Dials waiting for the agent's answer", () =>
      source.pendingDials(),
    );
    scrapedGauge(registers, `${PREFIX}established_connections`, "Connections established through agents", () =>
      source.establishedConnections(),
    );
    this.dialFailures = counter(`${PREFIX}dial_failure_count`, "Dials that failed, by reason", ["reason"]);
    this.dialsResent = counter(
      "cluster_proxy_server_dials_resent_total",
      "Dials sent again to another agent of the same cluster because the agent they were sent to went away before answering",
    );
    scrapedGauge(
      registers,
      "cluster_proxy_server_dials_waiting_for_agent",
      "Dials that found no agent for their address during the server's warm-up (--warm-up-dial-wait) and wait for one to connect",
      () => source.dialsWaitingForAgent(),
    );
    this.dialsWaitedForAgent = counter(
      "cluster_proxy_server_dials_waited_for_agent_total",
      "Dials that found no agent for their address during the server's warm-up (--warm-up-dial-wait), by result: sent (an agent that serves the address connected), expired (none within the wait: failed with No agent available), cancelled (the client gave up), released (the server drained or stopped: failed as draining), refused (too many dials waited already: failed at once)",
      ["result"],
    );
    this.stalledConnections = counter(
      "cluster_proxy_server_stalled_connections_total",
      "Connections closed because their reader read nothing for --connection-stall-timeout",
    );
    this.streamsCut = counter(
      "cluster_proxy_server_streams_cut_total",
      "gRPC streams reset because their peer did not read what was queued for it past the stream's bound (control replies or data), by service method: Proxy (clients), Connect (agents)",
      ["service_method"],
    );
    this.unresponsiveSessions = counter(
      "cluster_proxy_server_unresponsive_sessions_closed_total",
      "HTTP/2 sessions closed because a PING went unanswered for --keepalive-timeout, by port (agent, proxy) and probe (keepalive: the periodic keepalive ping; idle_probe: the ping of a session quiet for 5 s, which frees sessions the server ended with GOAWAY after a protocol error or a flood)",
      ["port", "probe"],
    );
    this.handshakesShed = counter(
      "cluster_proxy_server_tls_handshakes_shed_total",
      "Connections refused with a TLS user_canceled alert because --max-pending-handshakes connections already waited for their handshake, by port flag",
      ["port"],
    );
    scrapedGaugeByLabel(
      registers,
      "cluster_proxy_server_tls_handshakes_waiting",
      "Accepted connections waiting for their TLS handshake to start (--max-concurrent-handshakes are in progress), by port flag",
      "port",
      () => source.handshakesWaiting(),
    );
    this.connectionsRefused = counter(
      "cluster_proxy_server_connections_refused_total",
      "Connections closed before their TLS handshake, by port flag and reason: source_limit (--max-handshakes-per-source), hello_limit (--max-connections-awaiting-hello, the oldest silent one closed), hello_timeout (--client-hello-timeout), http_request (plain HTTP on a TLS port, answered 400), not_tls, tls_on_plain_port (a TLS ClientHello on a plain port, answered 400)",
      ["port", "reason"],
    );
    scrapedGaugeByLabel(
      registers,
      "cluster_proxy_server_tls_connections_awaiting_hello",
      "Accepted connections that have not sent their TLS ClientHello yet (they hold no handshake slot), by port flag",
      "port",
      () => source.awaitingHello(),
    );
    this.certificateExpiry = gauge(
      "cluster_proxy_server_certificate_expiry_timestamp_seconds",
      "Expiry (notAfter, Unix seconds) of the certificates in use, by flag: the serving certificate (--server-cert, --cluster-cert) and the earliest-expiring CA of each bundle (--server-ca-cert, --cluster-ca-cert)",
      ["flag"],
    );
    this.certificateReloads = counter(
      "cluster_proxy_server_certificate_reloads_total",
      "Certificate reloads after the files changed, by listener (agent, front) and result (success, failure: the new files were refused and the old certificates stay)",
      ["listener", "result"],
    );
    this.tlsHandshakes = counter(
      "cluster_proxy_server_tls_handshakes_total",
      "Completed TLS handshakes by port flag and kind: full, resumed (TLS 1.3 session ticket), resumed_refused (resumed with a client certificate that expired since: closed, the client's next connection is a full handshake)",
      ["port", "kind"],
    );
    this.ticketKeyReloads = counter(
      "cluster_proxy_server_tls_ticket_key_reloads_total",
      "Reloads of --tls-session-ticket-key-file after it changed, by result (success, failure: the file was refused and the keys in use stay)",
      ["result"],
    );
    this.agentIdentityRefusals = counter(
      "cluster_proxy_server_agent_identity_refusals_total",
      "Agent streams refused because their agentidentifiers claim what their certificate does not grant, by reason (host_not_granted, address_identifier, unreadable_certificate)",
      ["reason"],
    );
    this.agentAuthFailures = counter(
      "cluster_proxy_server_agent_token_auth_failures_total",
      "Agent streams refused because their ServiceAccount token was missing or not accepted (--agent-namespace, --agent-service-account, --authentication-audience)",
    );
    new Counter({
      ...this.packetCounts.counterConfig(
        `${PREFIX}stream_packets_total`,
        "Packets on the gRPC streams, by segment and packet type",
      ),
      registers,
    });
    scrapedGaugeByLabel(
      registers,
      "cluster_proxy_server_backends",
      "Agent streams connected per host identifier (cluster)",
      "identifier",
      () => source.backendsByIdentifier(),
    );
  }

  /** Count one packet on a segment. */
  packet(segment: Segment, type: number): void {
    this.packetCounts.add(segment, type);
  }

  /** Record a frontend write that started at `startMs` (performance.now(): no BigInt per write). */
  frontendWrite(startMs: number): void {
    this.frontendWriteDuration.observe((performance.now() - startMs) / 1000);
  }

  /** A gRPC stream of `method` opened (`grpc_connections`). */
  grpcStreamOpened(method: GrpcMethod): void {
    this.grpcStreams.set(method, this.grpcStreams.get(method)! + 1);
  }

  /** A gRPC stream of `method` closed. */
  grpcStreamClosed(method: GrpcMethod): void {
    this.grpcStreams.set(method, this.grpcStreams.get(method)! - 1);
  }

  /** A stream that ended with an error status (Go: a failed Recv, packet type "Unknown"). */
  streamErrorNoPacket(segment: Segment, code: number): void {
    this.streamErrors.inc({ segment, code: grpcCodeName(code), packet_type: "Unknown" });
  }

  /** A stream was cut for not reading (`Proxy`: a client, `Connect`: an agent). */
  streamCut(method: "Proxy" | "Connect"): void {
    this.streamsCut.inc({ service_method: method });
  }

  connectionStalled(): void {
    this.stalledConnections.inc();
  }

  dialFailed(reason: ServerDialFailureReason): void {
    this.dialFailures.inc({ reason });
  }
}
