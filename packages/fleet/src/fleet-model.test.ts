import assert from "node:assert/strict";
import { test } from "node:test";
import { FleetModel, type FleetChange, type RowReport } from "./fleet-model.js";
import { AUDIT_ENTRIES, BUCKET_MS, SERIES_POINTS, type AuditEntry } from "./fleet-types.js";
import { TrafficSeries } from "./traffic-series.js";
import { realClock } from "@cluster-proxy/kit";

const row = (cluster: string, over: Partial<RowReport> = {}): RowReport => ({
  cluster,
  installed: true,
  available: "True",
  latencyMs: 3,
  agentsByServer: { s1: 1 },
  serversExpected: 1,
  agentCertExpiry: null,
  reason: "",
  ...over,
});
const entry = (n: number): AuditEntry => ({
  time: new Date(n).toISOString(),
  user: `u${n}`,
  verb: "get",
  resource: "namespaces",
  status: 200,
  durationMs: 1,
  denied: false,
});

test("lastChange moves with installed, available and agents, not with latency", () => {
  let now = 1_000;
  const model = new FleetModel({ clock: { ...realClock, now: () => now } });
  const changes: FleetChange[] = [];
  model.subscribe((c) => changes.push(c));
  model.setRow(row("east"));
  const first = model.row("east")!.lastChange;
  now = 2_000;
  model.setRow(row("east", { latencyMs: 9 }));
  assert.equal(model.row("east")!.lastChange, first);
  assert.equal(model.row("east")!.latencyMs, 9);
  now = 3_000;
  model.setRow(row("east", { latencyMs: 9, available: "False", agentsByServer: {} }));
  assert.equal(model.row("east")!.lastChange, new Date(3_000).toISOString());
  model.setRow(row("east", { latencyMs: 9, available: "False", agentsByServer: {} }));
  assert.deepEqual(
    changes.map((c) => c.kind),
    ["row", "row", "row"],
    "an identical report is not a change",
  );
});

test("traffic and audit of clusters without a row are dropped; audit keeps the newest", () => {
  let now = 10 * BUCKET_MS;
  const model = new FleetModel({ clock: { ...realClock, now: () => now } });
  model.recordTraffic("ghost", { requests: 1 });
  model.recordAudit("ghost", entry(1));
  assert.equal(model.detail("ghost", true), undefined);
  model.setRow(row("east"));
  for (let i = 0; i < AUDIT_ENTRIES + 5; i++) model.recordAudit("east", entry(i));
  model.recordTraffic("east", { requests: 2, errors: 1, bytesIn: 10, bytesOut: 20 });
  now += BUCKET_MS;
  model.recordTraffic("east", { requests: 1 });
  const d = model.detail("east", true)!;
  assert.equal(d.audit!.length, AUDIT_ENTRIES);
  assert.equal(d.audit![0]!.user, `u${AUDIT_ENTRIES + 4}`, "newest first");
  assert.equal(model.detail("east", false)!.audit, null);
  assert.equal(d.series.length, SERIES_POINTS);
  assert.deepEqual(
    d.series.slice(-2).map((p) => p.requests),
    [2, 1],
  );
  model.removeCluster("east");
  assert.equal(model.detail("east", true), undefined);
});

test("a bucket older than 15 minutes reads as zero", () => {
  const series = new TrafficSeries();
  series.add(0, { requests: 5 });
  assert.equal(series.points(0).at(-1)!.requests, 5);
  assert.equal(series.points((SERIES_POINTS - 1) * BUCKET_MS)[0]!.requests, 5, "still in the window");
  const later = SERIES_POINTS * BUCKET_MS;
  assert.ok(series.points(later).every((p) => p.requests === 0));
  series.add(later, { requests: 1 });
  assert.equal(series.points(later).at(-1)!.requests, 1, "the slot is reused for the new bucket");
});
