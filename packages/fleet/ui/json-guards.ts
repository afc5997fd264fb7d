/**
 * Checks that a parsed event's data has the shape of the contract's JSON (fleet-types.ts), so the
 * page trusts a type only after looking at the value.
 */
import type { AuditEntry, ClusterDetail, FleetRow, FleetSnapshot, TrafficPoint } from "../src/fleet-types.js";

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A FleetRow's fields the page reads. */
export function isFleetRow(v: unknown): v is FleetRow {
  return (
    isObject(v) &&
    typeof v.cluster === "string" &&
    typeof v.installed === "boolean" &&
    (v.available === "True" || v.available === "False" || v.available === "Unknown") &&
    (v.latencyMs === null || typeof v.latencyMs === "number") &&
    isObject(v.agentsByServer) &&
    Object.values(v.agentsByServer).every((n) => typeof n === "number") &&
    (v.serversExpected === null || typeof v.serversExpected === "number") &&
    (v.agentCertExpiry === null || typeof v.agentCertExpiry === "string") &&
    typeof v.lastChange === "string" &&
    typeof v.reason === "string"
  );
}

/** A FleetSnapshot (every row checked). */
export function isFleetSnapshot(v: unknown): v is FleetSnapshot {
  return (
    isObject(v) &&
    typeof v.generated === "string" &&
    typeof v.audit === "boolean" &&
    Array.isArray(v.clusters) &&
    v.clusters.every(isFleetRow)
  );
}

function isTrafficPoint(v: unknown): v is TrafficPoint {
  return (
    isObject(v) &&
    typeof v.t === "number" &&
    typeof v.requests === "number" &&
    typeof v.errors === "number" &&
    typeof v.bytesIn === "number" &&
    typeof v.bytesOut === "number"
  );
}

function isAuditEntry(v: unknown): v is AuditEntry {
  return (
    isObject(v) &&
    typeof v.time === "string" &&
    typeof v.user === "string" &&
    typeof v.verb === "string" &&
    typeof v.resource === "string" &&
    (v.path === undefined || typeof v.path === "string") &&
    typeof v.status === "number" &&
    typeof v.durationMs === "number" &&
    typeof v.denied === "boolean" &&
    (v.reason === undefined || typeof v.reason === "string")
  );
}

/** A ClusterDetail (row, series and audit records checked). */
export function isClusterDetail(v: unknown): v is ClusterDetail {
  return (
    isObject(v) &&
    isFleetRow(v.row) &&
    Array.isArray(v.series) &&
    v.series.every(isTrafficPoint) &&
    typeof v.openStreams === "number" &&
    (v.audit === null || (Array.isArray(v.audit) && v.audit.every(isAuditEntry)))
  );
}
