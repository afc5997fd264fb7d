/**
 * The agent's Prometheus metrics, named as the Go proxy-agent names them
 * (`konnectivity_network_proxy_agent_*`) so existing dashboards keep working. Each agent owns its
 * own registry, so several agents can live in one process. Plain numbers rendered as prom-client
 * renders them (plain-metrics.ts), without loading prom-client.
 */
import {
  PlainCounter as Counter,
  PlainGauge as Gauge,
  PlainHistogram as Histogram,
  PlainRegistry,
} from "./plain-metrics.js";
import { packetTypeName } from "@cluster-proxy/protocol";
import { PacketCounts } from "@cluster-proxy/tunnel";

const PREFIX = "konnectivity_network_proxy_agent_";

/**
 * Why an endpoint dial failed (label values of `endpoint_dial_failure_total`): Go's `timeout` and
 * `unknown`, plus our `policy` (refused by the destination policy, see destination-policy.ts) and
 * `limit` (refused by `--max-dials` / `--max-dials-per-tunnel`).
 */
export type EndpointDialFailureReason = "timeout" | "unknown" | "policy" | "limit";

/** The flag of a dial cap that refused a dial (label of `dial_limit_refusals_total`). */
export type DialLimitFlag = "--max-dials" | "--max-dials-per-tunnel";

/** Stream segments as konnectivity labels them: packets the agent sends / receives. */
export type AgentSegment = "from_agent" | "to_agent";

/** The metrics of one agent and the registry that exposes them. */
export class AgentMetrics {
  /** The registry `/metrics` renders. */
  readonly registry = new PlainRegistry();
  readonly openServerConnections: Gauge;
  readonly knownServerCount: Gauge;
  readonly openEndpointConnections: Gauge;
  readonly endpointDialFailures: Counter<"reason">;
  /** Dials refused because a dial cap was reached, by the cap's flag. */
  readonly dialLimitRefusals: Counter<"flag">;
  readonly dialDuration: Histogram;
  readonly streamPackets: Counter<"segment" | "packet_type">;
  readonly streamErrors: Counter<"segment" | "code" | "packet_type">;
  /** Expiry (Unix seconds) of the certificates in use, by flag (`--agent-cert`; `--ca-cert`: its earliest CA). */
  readonly certificateExpiry: Gauge<"flag">;
  /** Reloads of changed certificate files by result (`success`, `failure`). */
  readonly certificateReloads: Counter<"result">;
  /** Go's deprecated server_connection_failure_count{direction}: to_server / from_server. */
  readonly serverConnectionFailures: Counter<"direction">;
  /** Packets per (segment, type), handed to `stream_packets_total` when it is scraped. */
  private readonly packetCounts = new PacketCounts<AgentSegment>(["from_agent", "to_agent"]);

  constructor() {
    const counter = <L extends string = string>(
      name: string,
      help: string,
      labelNames: readonly L[] = [],
    ): Counter<L> => this.registry.register(new Counter(name, help, labelNames));
    const gauge = <L extends string = string>(name: string, help: string, labelNames: readonly L[] = []): Gauge<L> =>
      this.registry.register(new Gauge(name, help, labelNames));
    this.openServerConnections = gauge(
      `${PREFIX}open_server_connections`,
      "Current number of open server connections.",
    );
    this.knownServerCount = gauge(
      `${PREFIX}known_server_count`,
      "Current number of servers the agent wants to be connected to (from the servercount header).",
    );
    this.knownServerCount.set(1);
    this.openEndpointConnections = gauge(
      `${PREFIX}open_endpoint_connections`,
      "Current number of open endpoint connections (including dials in progress).",
    );
    this.endpointDialFailures = counter(
      `${PREFIX}endpoint_dial_failure_total`,
      "Number of failed endpoint dials, by reason (timeout, unknown, policy: refused by the destination policy, limit: refused by --max-dials or --max-dials-per-tunnel).",
      ["reason"],
    );
    this.dialLimitRefusals = counter(
      "cluster_proxy_agent_dial_limit_refusals_total",
      "Dials refused because the agent (--max-dials) or the server tunnel (--max-dials-per-tunnel) already held that many endpoint connections, by flag",
      ["flag"],
    );
    this.dialDuration = this.registry.register(
      new Histogram(
        `${PREFIX}dial_duration_seconds`,
        "Latency of successful endpoint dials in seconds.",
        [0.005, 0.025, 0.1, 0.5, 2.5, 10, 30],
      ),
    );
    const packets = this.packetCounts.counterConfig(
      `${PREFIX}stream_packets_total`,
      "Count of packets processed, by segment and packet type.",
    );
    this.streamPackets = this.registry.register(
      new Counter(packets.name, packets.help, packets.labelNames, (c) => packets.collect.call(c)),
    );
    this.certificateExpiry = gauge(
      "cluster_proxy_agent_certificate_expiry_timestamp_seconds",
      "Expiry (notAfter, Unix seconds) of the certificates in use, by flag: --agent-cert, and the earliest-expiring CA of --ca-cert",
      ["flag"],
    );
    this.certificateReloads = counter(
      "cluster_proxy_agent_certificate_reloads_total",
      "Reloads of changed --ca-cert/--agent-cert/--agent-key files, by result (success, failure: refused, the old certificates stay)",
      ["result"],
    );
    this.serverConnectionFailures = counter(
      `${PREFIX}server_connection_failure_count`,
      "Count of failures to send to or receive from the proxy server, labeled by the direction (from_server or to_server). DEPRECATED, please use stream_packets_total and stream_errors_total",
      ["direction"],
    );
    this.streamErrors = counter(
      `${PREFIX}stream_errors_total`,
      "Count of gRPC stream errors, by segment, status code and packet type.",
      ["segment", "code", "packet_type"],
    );
  }

  /** Count `n` packets of `type` on `segment` (the hot path: plain numbers, see {@link PacketCounts}). */
  packet(segment: AgentSegment, type: number, n = 1): void {
    this.packetCounts.add(segment, type, n);
  }

  /** Count a failed send on the server stream. */
  streamError(segment: AgentSegment, code: string, type: number): void {
    this.streamErrors.labels(segment, code, packetTypeName(type)).inc();
    if (segment === "from_agent") this.serverConnectionFailures.labels("to_server").inc();
  }
}
