/**
 * The bookkeeping of one request: its audit record (a start line for a long-running one, the record when
 * it ends) and its metrics, with what a caller sends reaching them only from fixed sets.
 * Design: docs/design/gateway.md#bounded-state-at-the-gateways-port
 */
import { randomUUID } from "node:crypto";
import type { AuditRecord, AuditSink, AuditStart } from "./audit-log.js";
import { proxyVerbOf } from "./authorization.js";
import type { GatewayError } from "./gateway-error.js";
import { OTHER, codeLabel, verbLabel, type GatewayMetrics } from "./metrics.js";
import { realClock, type Clock } from "@cluster-proxy/kit";

/** Who else hears of a request (the fleet view): when it starts streaming, and its record when it ends. */
export interface RecordTap {
  /** The request of `cluster` started to stream (counted as open until {@link finished}). */
  streamOpened(cluster: string | undefined): void;
  /** The request ended with `record`; `streamed` when {@link streamOpened} was called for it. */
  finished(record: AuditRecord, streamed: boolean): void;
}

/** The methods a record names as they are (RFC 9110's, and PATCH); others are {@link OTHER}. */
export const KNOWN_METHODS: ReadonlySet<string> = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "OPTIONS",
  "CONNECT",
  "TRACE",
]);

/** Whether the record of a request is long-running by itself (a watch, an upgrade): it gets a start line. */
function isLongRunning(r: AuditRecord): boolean {
  return r.upgrade === true || r.verb === "watch";
}

/** The start line of `r`: what is known before the relay. */
function startLineOf(r: AuditRecord): AuditStart {
  const { stage: _stage, code: _code, bytesIn: _in, bytesOut: _out, durationMs: _ms, reason: _reason, ...known } = r;
  return { ...known, stage: "start" };
}

/** One request's record; see the module comment. */
export class RequestRecord {
  readonly record: AuditRecord;
  private readonly started: number;
  /** Whether the gateway serves the method (else it is counted with verb {@link OTHER}). */
  private readonly served: boolean;
  private done = false;
  private streaming = false;
  private longRunning = false;

  /**
   * @param metrics where the request is counted (undefined: nowhere, e.g. the fleet view's own
   *   requests, which are audited only)
   * @param clock the time of the record and of its duration (default the kit's `realClock`)
   */
  constructor(
    method: string,
    private readonly audit: AuditSink,
    private readonly metrics: GatewayMetrics | undefined,
    private readonly tap?: RecordTap,
    private readonly clock: Clock = realClock,
  ) {
    this.started = clock.now();
    this.served = proxyVerbOf(method) !== undefined;
    this.record = {
      time: new Date(this.started).toISOString(),
      requestID: randomUUID(),
      stage: "end",
      method: KNOWN_METHODS.has(method) ? method : OTHER,
      code: 0,
      bytesIn: 0,
      bytesOut: 0,
      durationMs: 0,
      decision: "allow",
    };
  }

  /** The `cluster` label of this request. */
  private get clusterLabel(): string {
    return this.metrics?.clusterLabel(this.record.cluster) ?? "";
  }

  /** Give this request a start line although its record does not say it is long-running (`logs -f`). */
  markLongRunning(): void {
    this.longRunning = true;
  }

  /**
   * The relay begins: count the request as an open stream until {@link finish}, and write the
   * start line of a long-running request.
   */
  startStreaming(): void {
    if (this.streaming || this.done) return;
    this.streaming = true;
    if (this.longRunning || isLongRunning(this.record)) this.audit.write(startLineOf(this.record));
    this.metrics?.openStreams.inc({ cluster: this.clusterLabel });
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

  /**
   * End the record with `code` (an error's decision and reason when it ended in one; with a
   * `reason` of the gateway's own, a 4xx is a `deny` and a 5xx an `error`); once.
   */
  finish(code: number, err?: GatewayError, reason?: string): void {
    if (this.done) return;
    this.done = true;
    const r = this.record;
    r.code = code;
    r.durationMs = this.clock.now() - this.started;
    if (err) {
      r.decision = err.decision;
      r.reason = err.message;
    } else if (reason) {
      r.decision = code >= 500 ? "error" : code >= 400 ? "deny" : r.decision;
      r.reason = reason;
    }
    const m = this.metrics;
    if (m) {
      const cluster = this.clusterLabel;
      if (this.streaming) m.openStreams.dec({ cluster });
      m.requests.inc({ cluster, code: codeLabel(code), verb: this.served ? verbLabel(r.verb) : OTHER });
      m.latency.observe({ cluster }, r.durationMs / 1000);
      if (r.bytesIn) m.bytes.inc({ cluster, direction: "in" }, r.bytesIn);
      if (r.bytesOut) m.bytes.inc({ cluster, direction: "out" }, r.bytesOut);
    }
    this.audit.write(r);
    this.tap?.finished(r, this.streaming);
  }
}
