/**
 * One cluster's detail: its row's state, request rate, errors and bytes over the last 15 minutes
 * (5 s buckets shown per second), open streams and recent audit records. Updated by the `detail`
 * events of the page's event stream.
 */
import { useEffect, useRef } from "preact/hooks";
import type { ClusterDetail, TrafficPoint } from "../src/fleet-types.js";
import { AuditTable } from "./audit-table.js";
import { bytes, expiry, latency, rate, relative } from "./format.js";
import { TrafficChart } from "./traffic-chart.js";

/** Bucket width of the series, s (fleet-types' BUCKET_MS). */
const BUCKET_S = 5;

function sum(series: TrafficPoint[], pick: (p: TrafficPoint) => number): number {
  return series.reduce((a, p) => a + pick(p), 0);
}

function Charts(props: { detail: ClusterDetail }) {
  const s = props.detail.series;
  const xs = s.map((p) => p.t / 1000);
  const requests = sum(s, (p) => p.requests);
  const errors = sum(s, (p) => p.errors);
  const bytesIn = sum(s, (p) => p.bytesIn);
  const bytesOut = sum(s, (p) => p.bytesOut);
  const peak = s.reduce((m, p) => Math.max(m, p.requests / BUCKET_S), 0);
  return (
    <div class="charts">
      <TrafficChart
        title="Requests /s"
        testId="chart-requests"
        attrs={{ "data-total-requests": String(requests) }}
        xs={xs}
        lines={[{ label: "requests/s", values: s.map((p) => p.requests / BUCKET_S), colorVar: "--chart-1" }]}
        format={rate}
        summary={`${requests} requests in 15 minutes, peak ${rate(peak)} per second`}
      />
      <TrafficChart
        title="Errors /s"
        testId="chart-errors"
        attrs={{ "data-total-errors": String(errors) }}
        xs={xs}
        lines={[{ label: "errors/s", values: s.map((p) => p.errors / BUCKET_S), colorVar: "--chart-err" }]}
        format={rate}
        summary={`${errors} errors (status 500 or more, or no answer) in 15 minutes`}
      />
      <TrafficChart
        title="Bytes /s"
        testId="chart-bytes"
        xs={xs}
        lines={[
          { label: "in", values: s.map((p) => p.bytesIn / BUCKET_S), colorVar: "--chart-1" },
          { label: "out", values: s.map((p) => p.bytesOut / BUCKET_S), colorVar: "--chart-2" },
        ]}
        format={bytes}
        summary={`${bytes(bytesIn)} in and ${bytes(bytesOut)} out in 15 minutes`}
      />
    </div>
  );
}

/** The detail panel of `cluster`; `detail` is null until the first `detail` event. */
export function ClusterDetailPanel(props: {
  cluster: string;
  detail: ClusterDetail | null;
  missing: boolean;
  now: number;
  close: () => void;
}) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), [props.cluster]);
  const d = props.detail !== null && props.detail.row.cluster === props.cluster ? props.detail : null;
  const row = d?.row;
  const exp = row === undefined ? null : expiry(row.agentCertExpiry, props.now);
  return (
    <aside class="detail" data-testid="cluster-detail" data-cluster={props.cluster} aria-labelledby="detail-title">
      <header class="detail-head">
        <h2 id="detail-title" tabIndex={-1} ref={heading}>
          {props.cluster}
        </h2>
        <button
          type="button"
          class="close"
          data-testid="detail-close"
          onClick={props.close}
          aria-label="Close the detail"
        >
          ✕ <span class="key-hint">Esc</span>
        </button>
      </header>
      {props.missing ? (
        <p class="notice" data-testid="detail-missing">
          No cluster named {props.cluster}, or you may not see it.
        </p>
      ) : d === null || row === undefined || exp === null ? (
        <p class="notice">Loading…</p>
      ) : (
        <>
          <dl class="facts">
            <div>
              <dt>Available</dt>
              <dd class={`avail avail-${row.available}`}>
                <span class="dot" aria-hidden="true" />
                {row.available === "True" ? "yes" : row.available === "False" ? "no" : "unknown"}
                {row.reason !== "" && <span class="reason"> ({row.reason})</span>}
              </dd>
            </div>
            <div>
              <dt>Latency</dt>
              <dd>{latency(row.latencyMs)}</dd>
            </div>
            <div>
              <dt>Open streams</dt>
              <dd data-testid="open-streams">{d.openStreams}</dd>
            </div>
            <div>
              <dt>Agent cert</dt>
              <dd class={exp.warn ? "warn" : undefined}>{exp.text}</dd>
            </div>
            <div>
              <dt>Agents</dt>
              <dd>
                {Object.keys(row.agentsByServer).length === 0
                  ? "none"
                  : Object.entries(row.agentsByServer)
                      .map(([s, n]) => `${s}: ${n}`)
                      .join(", ")}
              </dd>
            </div>
            <div>
              <dt>Last change</dt>
              <dd title={row.lastChange}>{relative(row.lastChange, props.now)}</dd>
            </div>
          </dl>
          <Charts detail={d} />
          <h3>Audit</h3>
          <AuditTable audit={d.audit} now={props.now} />
        </>
      )}
    </aside>
  );
}
