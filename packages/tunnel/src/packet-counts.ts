/**
 * Packet counters for the hot path of server and agent: packets are counted in plain numbers per
 * (segment, packet type) and handed to a Prometheus counter only when it is scraped, because
 * prom-client hashes the label set on every `inc()`, which showed in dial-rate profiles.
 */
import { packetTypeName } from "@cluster-proxy/protocol";

/** Slots per segment: packet types are taken modulo this (konnectivity has 7). */
const TYPES_PER_SEGMENT = 64;

/** The labels a packet counter reports a slot with (konnectivity's `segment`, `packet_type`). */
export interface PacketLabels<S extends string> {
  segment: S;
  packet_type: string;
}

/** Packets counted per segment (one of `segments`) and packet type, reported on scrape. */
export class PacketCounts<S extends string> {
  private readonly counts: Float64Array;
  private readonly reported: Float64Array;
  /** The packet type each used slot counts (for its label). */
  private readonly types = new Map<number, number>();

  constructor(private readonly segments: readonly S[]) {
    this.counts = new Float64Array(segments.length * TYPES_PER_SEGMENT);
    this.reported = new Float64Array(segments.length * TYPES_PER_SEGMENT);
  }

  /** Count `n` packets of `type` on `segment`. */
  add(segment: S, type: number, n = 1): void {
    const key = this.segments.indexOf(segment) * TYPES_PER_SEGMENT + (type & (TYPES_PER_SEGMENT - 1));
    const count = this.counts[key] ?? 0;
    if (count === 0) this.types.set(key, type);
    this.counts[key] = count + n;
  }

  /**
   * Hand every slot counted since the last call to `report` (a prom-client counter's `collect()`
   * calls this with its `inc`), with its labels and the packets added since.
   */
  report(report: (labels: PacketLabels<S>, delta: number) => void): void {
    for (const [key, type] of this.types) {
      const delta = this.counts[key]! - this.reported[key]!;
      if (delta <= 0) continue;
      this.reported[key] = this.counts[key]!;
      report(
        { segment: this.segments[Math.floor(key / TYPES_PER_SEGMENT)]!, packet_type: packetTypeName(type) },
        delta,
      );
    }
  }

  /**
   * The configuration of the counter these counts feed (`stream_packets_total`): its labels and a
   * `collect()` that hands the counter the packets counted since its last scrape. Add `registers`.
   * Structural, so this package needs no prom-client.
   */
  counterConfig(name: string, help: string): PacketCounterConfig<S> {
    const report = this.report.bind(this);
    return {
      name,
      help,
      labelNames: ["segment", "packet_type"],
      collect() {
        report((labels, delta) => this.inc(labels, delta));
      },
    };
  }
}

/** What {@link PacketCounts.counterConfig} returns: a prom-client `CounterConfiguration` without `registers`. */
export interface PacketCounterConfig<S extends string> {
  name: string;
  help: string;
  labelNames: ("segment" | "packet_type")[];
  collect(this: { inc(labels: PacketLabels<S>, value: number): void }): void;
}
