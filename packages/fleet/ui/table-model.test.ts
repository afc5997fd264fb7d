import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { FleetRow } from "../src/fleet-types.js";
import { expiry, latency, relative } from "./format.js";
import { rowWindow, serversReached, visibleRows } from "./table-model.js";

function row(cluster: string, over: Partial<FleetRow> = {}): FleetRow {
  return {
    cluster,
    installed: true,
    available: "True",
    latencyMs: 10,
    agentsByServer: { s0: 1, s1: 1 },
    serversExpected: 2,
    agentCertExpiry: "2030-01-01T00:00:00Z",
    lastChange: "2026-01-01T00:00:00Z",
    reason: "",
    ...over,
  };
}

const rows = [
  row("east", { latencyMs: 30 }),
  row("west", { latencyMs: 5, available: "False", agentsByServer: {} }),
  row("north", { latencyMs: null, available: "Unknown" }),
  row("south", { latencyMs: 5, agentsByServer: { s0: 2, s1: 0 } }),
];
const names = (r: FleetRow[]): string[] => r.map((x) => x.cluster);
const all = { text: "", onlyUnavailable: false };

describe("visibleRows", () => {
  it("sorts by latency both ways with unknown latencies last, ties by name", () => {
    assert.deepEqual(names(visibleRows(rows, all, { key: "latency", descending: false })), [
      "south",
      "west",
      "east",
      "north",
    ]);
    assert.deepEqual(names(visibleRows(rows, all, { key: "latency", descending: true })), [
      "east",
      "south",
      "west",
      "north",
    ]);
  });

  it("sorts by name, availability and agents", () => {
    assert.deepEqual(names(visibleRows(rows, all, { key: "cluster", descending: true })), [
      "west",
      "south",
      "north",
      "east",
    ]);
    assert.deepEqual(names(visibleRows(rows, all, { key: "available", descending: false })), [
      "west",
      "north",
      "east",
      "south",
    ]);
    assert.deepEqual(names(visibleRows(rows, all, { key: "agents", descending: false })), [
      "west",
      "south",
      "east",
      "north",
    ]);
  });

  it("filters on a substring of the name, case-insensitively, and on unavailability", () => {
    const order = { key: "cluster", descending: false } as const;
    assert.deepEqual(names(visibleRows(rows, { text: " ST", onlyUnavailable: false }, order)), ["east", "west"]);
    assert.deepEqual(names(visibleRows(rows, { text: "", onlyUnavailable: true }, order)), ["north", "west"]);
    assert.deepEqual(names(visibleRows(rows, { text: "we", onlyUnavailable: true }, order)), ["west"]);
  });

  it("counts the replicas an agent reaches", () => {
    assert.equal(serversReached(rows[3] ?? row("x")), 1);
  });
});

describe("rowWindow", () => {
  it("covers the rows in view plus the overscan, clamped to the list", () => {
    assert.deepEqual(rowWindow(1000, 0, 340, 34, 5), { start: 0, end: 15 });
    assert.deepEqual(rowWindow(1000, 3400, 340, 34, 5), { start: 95, end: 115 });
    assert.deepEqual(rowWindow(1000, 34_000, 340, 34, 5), { start: 995, end: 1000 });
    assert.deepEqual(rowWindow(3, 0, 340, 34, 5), { start: 0, end: 3 });
  });
});

describe("format", () => {
  const now = Date.parse("2026-06-01T00:00:00Z");
  it("writes relative times", () => {
    assert.equal(relative("2026-06-01T00:00:03Z", now), "just now");
    assert.equal(relative("2026-05-31T23:55:00Z", now), "5 min ago");
    assert.equal(relative("2026-06-13T00:00:00Z", now), "in 12 d");
  });
  it("warns about a certificate expiring within 7 days or expired", () => {
    assert.deepEqual(expiry("2026-06-13T00:00:00Z", now), { text: "in 12 d", warn: false });
    assert.deepEqual(expiry("2026-06-04T00:00:00Z", now), { text: "in 3 d", warn: true });
    assert.deepEqual(expiry("2026-05-30T00:00:00Z", now), { text: "expired 2 d ago", warn: true });
    assert.deepEqual(expiry(null, now), { text: "unknown", warn: false });
  });
  it("writes latencies", () => {
    assert.equal(latency(null), "—");
    assert.equal(latency(0.84), "0.8 ms");
    assert.equal(latency(42.4), "42 ms");
    assert.equal(latency(1500), "1.5 s");
  });
});
