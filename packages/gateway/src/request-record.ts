/**
 * The bookkeeping of one request: its audit record, filled in as the request is admitted and
 * relayed, written once when it ends (with the status, bytes and duration), plus its metrics.
 */
import { randomUUID } from "node:crypto";
import type { AuditRecord, AuditSink } from "./audit-log.js";
import type { GatewayError } from "./gateway-error.js";
import type { GatewayMetrics } from "./metrics.js";

/** Who else hears of a request (the fleet view): when it starts streaming, and its record when it ends. */
export interface RecordTap {
  /** The request of `cluster` started to stream (counted as open until {@link finished}). */
  streamOpened(cluster: string | undefined): void;
  /** The request ended with `record`; `streamed` when {@link streamOpened} was called for it. */
  finished(record: AuditRecord, streamed: boolean): void;
}

/** One request's record; see the module comment. */
export class RequestRecord {
  readonly record: AuditRecord;
  private readonly started: number;
  private done = false;
  private streaming = false;

  constructor(
    method: string,
    private readonly audit: AuditSink,
    private readonly metrics: GatewayMetrics,
    private readonly tap?: RecordTap,
    now: () => number = Date.now,
  ) {
    this.started = now();
    this.now = now;
    this.record = {
      time: new Date(this.started).toISOString(),
      requestID: randomUUID(),
      method,
      code: 0,
      bytesIn: 0,
      bytesOut: 0,
      durationMs: 0,
      decision: "allow",
    };
  }

  private readonly now: () => number;

  /** The `cluster` label of this request. */
  private get clusterLabel(): string {
    return this.metrics.clusterLabel(this.record.cluster);
  }

  /** Count the request as an open stream until {@link finish}. */
  startStreaming(): void {
    if (this.streaming) return;
    this.streaming = true;
    this.metrics.openStreams.inc({ cluster: this.clusterLabel });
    this.tap?.streamOpened(this.record.cluster);
  }

  /** Bytes from the caller. */
  addIn(n: number): void {
    this.record.bytesIn += n;
  }

  /** Bytes to the caller. */
  addOut(n: number): void {
    this.record.bytesOut += n;
  }

  /** End the record with `code` (an error's decision and reason when it ended in one); once. */
  finish(code: number, err?: GatewayError, reason?: string): void {
    if (this.done) return;
    this.done = true;
    const r = this.record;
    r.code = code;
    r.durationMs = this.now() - this.started;
    if (err) {
      r.decision = err.decision;
      r.reason = err.message;
    } else if (reason) {
      r.decision = code >= 500 ? "error" : r.decision;
      r.reason = reason;
    }
    const cluster = this.clusterLabel;
    if (this.streaming) this.metrics.openStreams.dec({ cluster });
    this.metrics.requests.inc({ cluster, code: String(code), verb: r.verb ?? "unknown" });
    this.metrics.latency.observe({ cluster }, r.durationMs / 1000);
    if (r.bytesIn) this.metrics.bytes.inc({ cluster, direction: "in" }, r.bytesIn);
    if (r.bytesOut) this.metrics.bytes.inc({ cluster, direction: "out" }, r.bytesOut);
    this.audit.write(r);
    this.tap?.finished(r, this.streaming);
  }
}
