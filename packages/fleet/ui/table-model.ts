/**
 * The fleet table's rows in the order and selection the viewer asked for: sorting and filtering
 * happen in the page, over the one snapshot it holds (no request per cluster).
 */
import type { FleetRow } from "../src/fleet-types.js";

/** A sortable column. */
export type SortKey = "cluster" | "installed" | "available" | "latency" | "agents" | "certExpiry" | "lastChange";

/** The table's order: a column and a direction. */
export interface SortOrder {
  key: SortKey;
  descending: boolean;
}

/** What the viewer filters on. */
export interface RowFilter {
  /** Substring of the cluster name, case-insensitive; "" keeps every row. */
  text: string;
  /** Keep only rows whose `available` is not "True". */
  onlyUnavailable: boolean;
}

/** Proxy-server replicas the cluster's agents reach (with at least one agent connected). */
export function serversReached(row: FleetRow): number {
  return Object.values(row.agentsByServer).filter((n) => n > 0).length;
}

const availableRank: Record<FleetRow["available"], number> = { False: 0, Unknown: 1, True: 2 };

/** A row's value for a column; null sorts last in both directions. */
function sortValue(row: FleetRow, key: SortKey): number | string | null {
  switch (key) {
    case "cluster":
      return row.cluster;
    case "installed":
      return row.installed ? 1 : 0;
    case "available":
      return availableRank[row.available];
    case "latency":
      return row.latencyMs;
    case "agents": {
      const reached = serversReached(row);
      return row.serversExpected !== null && row.serversExpected > 0 ? reached / row.serversExpected : reached;
    }
    case "certExpiry":
      return row.agentCertExpiry === null ? null : Date.parse(row.agentCertExpiry);
    case "lastChange":
      return Date.parse(row.lastChange);
  }
}

function compareValues(a: number | string, b: number | string): number {
  if (typeof a === "string" && typeof b === "string") return a < b ? -1 : a > b ? 1 : 0;
  return Number(a) - Number(b);
}

/** The rows the filter keeps, in the given order (ties broken by cluster name, ascending). */
export function visibleRows(rows: readonly FleetRow[], filter: RowFilter, order: SortOrder): FleetRow[] {
  const needle = filter.text.trim().toLowerCase();
  const kept = rows.filter(
    (r) =>
      (needle === "" || r.cluster.toLowerCase().includes(needle)) &&
      (!filter.onlyUnavailable || r.available !== "True"),
  );
  const dir = order.descending ? -1 : 1;
  const keyed = kept.map((row) => ({ row, value: sortValue(row, order.key) }));
  keyed.sort((x, y) => {
    if (x.value === null || y.value === null || Number.isNaN(x.value) || Number.isNaN(y.value)) {
      const xm = x.value === null || Number.isNaN(x.value);
      const ym = y.value === null || Number.isNaN(y.value);
      if (xm !== ym) return xm ? 1 : -1;
    } else {
      const c = compareValues(x.value, y.value);
      if (c !== 0) return c * dir;
    }
    return x.row.cluster < y.row.cluster ? -1 : x.row.cluster > y.row.cluster ? 1 : 0;
  });
  return keyed.map((k) => k.row);
}

/** The rows a window of `viewport` px shows at `scrollTop`, plus `overscan` rows each side. */
export function rowWindow(
  count: number,
  scrollTop: number,
  viewport: number,
  rowHeight: number,
  overscan: number,
): { start: number; end: number } {
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const last = Math.ceil((Math.max(0, scrollTop) + Math.max(0, viewport)) / rowHeight);
  return { start: Math.max(0, Math.min(count, first - overscan)), end: Math.min(count, last + overscan) };
}
