/**
 * Server metrics, named like konnectivity's (`konnectivity_network_proxy_server_*`) where the
 * concept matches so existing dashboards work, plus per-cluster series of our own
 * (`cluster_proxy_server_*`). Each server owns its Registry (several servers can share a process).
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { packetTypeName } from "@cluster-proxy/protocol";
import type { DialFailureReason } from "@cluster-proxy/tunnel";

const PREFIX = "konnectivity_network_proxy_server_";

/** Stream segments (konnectivity label values). */
export type Segment = "from_client" | "to_client" | "from_agent" | "to_agent";
const SEGMENTS: readonly Segment[] = ["from_client", "to_client", "from_agent", "to_agent"];

/** Live values the gauges read at scrape time. */
export interface MetricsSource {
  readyBackends(): { strategy: string; count: number }[];
  pendingDials(): number;
  establishedConnections(): number;
  /** Agent streams per `host` identifier. */
  backendsByIdentifier(): Map<string, number>;
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly dialDuration: Histogram;
  readonly grpcConnections: Gauge;
  readonly httpConnections: Gauge;
  readonly dialFailures: Counter;
  /** Agents refused because their identifiers exceed what their certificate grants (agent-identity.ts). */
  readonly agentIdentityRefusals: Counter<"reason">;
  readonly stalledConnections: Counter;
  /** Expiry (Unix seconds) of the certificates in use, by flag (leaf: `--server-cert`, `--cluster-cert`; earliest CA of a bundle: `--server-ca-cert`, `--cluster-ca-cert`). */
  readonly certificateExpiry: Gauge<"flag">;
  /** Certificate reloads by listener (`agent`, `front`) and result (`success`, `failure`). */
  readonly certificateReloads: Counter<"listener" | "result">;
  private readonly streamPackets: Counter;
  // Packets are counted in plain numbers per (segment, type) and handed to the counter when it is
  // scraped: prom-client hashes the label set on every inc(), which showed in dial-rate profiles.
  private readonly packetCounts = new Float64Array(SEGMENTS.length * 64);
  private readonly packetReported = new Float64Array(SEGMENTS.length * 64);
  /** The packet type each used slot counts (for its label). */
  private readonly packetTypes = new Map<number, number>();

  constructor(source: MetricsSource) {
    const registers = [this.registry];
    this.dialDuration = new Histogram({
      name: `${PREFIX}dial_duration_seconds`,
      help: "Latency of dial to the remote endpoint in seconds",
      buckets: [0.005, 0.025, 0.1, 0.5, 2.5, 12.5],
      registers,
    });
    this.grpcConnections = new Gauge({
      name: `${PREFIX}grpc_connections`,
      help: "Number of current gRPC streams",
      labelNames: ["service_method"],
      registers,
    });
    this.httpConnections = new Gauge({
      name: `${PREFIX}http_connections`,
      help: "Number of current HTTP CONNECT connections",
      registers,
    });
    new Gauge({
      name: `${PREFIX}ready_backends`,
      help: "Number of agent streams each proxy strategy can route to",
      labelNames: ["proxy_strategy"],
      registers,
      collect() {
        for (const { strategy, count } of source.readyBackends()) this.set({ proxy_strategy: strategy }, count);
      },
    });
    new Gauge({
      name: `${PREFIX}pending_backend_dials`,
      help: "Dials waiting for the agent's answer",
      registers,
      collect() {
        this.set(source.pendingDials());
      },
    });
    new Gauge({
      name: `${PREFIX}established_connections`,
      help: "Connections established through agents",
      registers,
      collect() {
        this.set(source.establishedConnections());
      },
    });
    this.dialFailures = new Counter({
      name: `${PREFIX}dial_failure_count`,
      help: "Dials that failed, by reason",
      labelNames: ["reason"],
      registers,
    });
    this.stalledConnections = new Counter({
      name: "cluster_proxy_server_stalled_connections_total",
      help: "Connections closed because their reader read nothing for --connection-stall-timeout",
      registers,
    });
    this.certificateExpiry = new Gauge({
      name: "cluster_proxy_server_certificate_expiry_timestamp_seconds",
      help: "Expiry (notAfter, Unix seconds) of the certificates in use, by flag: the serving certificate (--server-cert, --cluster-cert) and the earliest-expiring CA of each bundle (--server-ca-cert, --cluster-ca-cert)",
      labelNames: ["flag"],
      registers,
    });
    this.certificateReloads = new Counter({
      name: "cluster_proxy_server_certificate_reloads_total",
      help: "Certificate reloads after the files changed, by listener (agent, front) and result (success, failure: the new files were refused and the old certificates stay)",
      labelNames: ["listener", "result"],
      registers,
    });
    this.agentIdentityRefusals = new Counter({
      name: "cluster_proxy_server_agent_identity_refusals_total",
      help: "Agent streams refused because their agentidentifiers claim what their certificate does not grant, by reason (host_not_granted, address_identifier, unreadable_certificate)",
      labelNames: ["reason"],
      registers,
    });
    const { packetCounts, packetReported, packetTypes } = this;
    this.streamPackets = new Counter({
      name: `${PREFIX}stream_packets_total`,
      help: "Packets on the gRPC streams, by segment and packet type",
      labelNames: ["segment", "packet_type"],
      registers,
      collect() {
        for (const [key, type] of packetTypes) {
          const delta = packetCounts[key]! - packetReported[key]!;
          if (delta <= 0) continue;
          packetReported[key] = packetCounts[key]!;
          this.inc({ segment: SEGMENTS[key >> 6]!, packet_type: packetTypeName(type) }, delta);
        }
      },
    });
    new Gauge({
      name: "cluster_proxy_server_backends",
      help: "Agent streams connected per host identifier (cluster)",
      labelNames: ["identifier"],
      registers,
      collect() {
        this.reset();
        for (const [identifier, count] of source.backendsByIdentifier()) this.set({ identifier }, count);
      },
    });
  }

  /** Count one packet on a segment. */
  packet(segment: Segment, type: number): void {
    const key = SEGMENTS.indexOf(segment) * 64 + (type & 63);
    const count = this.packetCounts[key] ?? 0;
    if (count === 0) this.packetTypes.set(key, type);
    this.packetCounts[key] = count + 1;
  }

  connectionStalled(): void {
    this.stalledConnections.inc();
  }

  dialFailed(reason: DialFailureReason): void {
    this.dialFailures.inc({ reason });
  }
}
