/**
 * The fleet table: one row per cluster, sorted and filtered in the page, windowed (fixed row
 * height; only the rows in view plus an overscan are in the DOM) so 1,000 clusters stay fast.
 * Keyboard: Tab reaches the filter, the sort buttons and one row; arrows, Page Up/Down, Home and
 * End move between rows; Enter or Space opens a row's detail.
 */
import type { JSX, TargetedKeyboardEvent } from "preact";
import { useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import type { FleetRow } from "../src/fleet-types.js";
import { expiry, latency, relative } from "./format.js";
import { rowWindow, serversReached, visibleRows, type SortKey, type SortOrder } from "./table-model.js";

/** Height of a row, px (styles.css sets the same). */
export const ROW_HEIGHT = 34;
/** Height of the header row, px (styles.css sets the same). */
export const HEADER_HEIGHT = 38;
/** Rows rendered beyond the visible ones, each side. */
export const OVERSCAN = 6;

interface Column {
  key: SortKey;
  label: string;
  cell: (row: FleetRow, now: number) => JSX.Element | string;
}

function agentsTitle(row: FleetRow): string {
  const entries = Object.entries(row.agentsByServer).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const lines = entries.map(([server, n]) => `${server}: ${n} agent${n === 1 ? "" : "s"}`);
  const expected = row.serversExpected === null ? "unknown" : String(row.serversExpected);
  return [`proxy-server replicas expected: ${expected}`, ...(lines.length === 0 ? ["no agent connected"] : lines)].join(
    "\n",
  );
}

const availableText: Record<FleetRow["available"], string> = { True: "yes", False: "no", Unknown: "unknown" };

const columns: Column[] = [
  { key: "cluster", label: "Cluster", cell: (r) => <span class="name">{r.cluster}</span> },
  { key: "installed", label: "Installed", cell: (r) => (r.installed ? "yes" : "no") },
  {
    key: "available",
    label: "Available",
    cell: (r) => (
      <span class={`avail avail-${r.available}`} title={r.reason === "" ? undefined : r.reason}>
        <span class="dot" aria-hidden="true" />
        {availableText[r.available]}
      </span>
    ),
  },
  { key: "latency", label: "Latency", cell: (r) => <span class="num">{latency(r.latencyMs)}</span> },
  {
    key: "agents",
    label: "Agents per server",
    cell: (r) => {
      const reached = serversReached(r);
      const short = r.serversExpected !== null && reached < r.serversExpected;
      return (
        <span class={short ? "num warn" : "num"} title={agentsTitle(r)}>
          {reached}/{r.serversExpected ?? "?"}
        </span>
      );
    },
  },
  {
    key: "certExpiry",
    label: "Agent cert expiry",
    cell: (r, now) => {
      const e = expiry(r.agentCertExpiry, now);
      return (
        <span class={e.warn ? "warn" : undefined} title={r.agentCertExpiry ?? undefined}>
          {e.warn && <span aria-label="warning: expires soon">⚠ </span>}
          {e.text}
        </span>
      );
    },
  },
  {
    key: "lastChange",
    label: "Last change",
    cell: (r, now) => <span title={r.lastChange}>{relative(r.lastChange, now)}</span>,
  },
];

/** The table with its filter bar. */
export function FleetTable(props: {
  rows: readonly FleetRow[];
  now: number;
  selected: string | null;
  open: (cluster: string) => void;
}) {
  const [order, setOrder] = useState<SortOrder>({ key: "cluster", descending: false });
  const [text, setText] = useState("");
  const [onlyUnavailable, setOnlyUnavailable] = useState(false);
  const [scrollTop, setScrollTop] = useState(0);
  const [viewport, setViewport] = useState(600);
  const [active, setActive] = useState(0);
  const scroller = useRef<HTMLDivElement>(null);
  const focusPending = useRef(false);

  const rows = useMemo(
    () => visibleRows(props.rows, { text, onlyUnavailable }, order),
    [props.rows, text, onlyUnavailable, order],
  );
  const activeIndex = Math.min(active, Math.max(0, rows.length - 1));

  useLayoutEffect(() => {
    const el = scroller.current;
    if (el === null) return;
    setViewport(el.clientHeight);
    const ro = new ResizeObserver(() => setViewport(el.clientHeight));
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  // When the detail closes, focus goes back to its row (when the row is on screen).
  const lastSelected = useRef(props.selected);
  useLayoutEffect(() => {
    const was = lastSelected.current;
    lastSelected.current = props.selected;
    if (props.selected !== null || was === null) return;
    scroller.current
      ?.querySelector<HTMLElement>(`tr[data-cluster="${CSS.escape(was)}"]`)
      ?.focus({ preventScroll: true });
  }, [props.selected]);

  useLayoutEffect(() => {
    if (!focusPending.current) return;
    focusPending.current = false;
    const row = scroller.current?.querySelector<HTMLElement>(`tr[data-index="${activeIndex}"]`);
    row?.focus({ preventScroll: true });
  });

  const { start, end } = rowWindow(rows.length, scrollTop, viewport - HEADER_HEIGHT, ROW_HEIGHT, OVERSCAN);
  const tabbable = activeIndex >= start && activeIndex < end ? activeIndex : start;

  const sortBy = (key: SortKey): void =>
    setOrder((o) => (o.key === key ? { key, descending: !o.descending } : { key, descending: false }));

  const moveTo = (index: number): void => {
    const i = Math.max(0, Math.min(rows.length - 1, index));
    const el = scroller.current;
    if (el !== null) {
      const top = i * ROW_HEIGHT;
      const room = el.clientHeight - HEADER_HEIGHT;
      if (top < el.scrollTop) el.scrollTop = top;
      else if (top + ROW_HEIGHT > el.scrollTop + room) el.scrollTop = top + ROW_HEIGHT - room;
      setScrollTop(el.scrollTop);
    }
    focusPending.current = true;
    setActive(i);
  };

  const onRowKey = (e: TargetedKeyboardEvent<HTMLTableRowElement>, index: number, cluster: string): void => {
    const page = Math.max(1, Math.floor((viewport - HEADER_HEIGHT) / ROW_HEIGHT) - 1);
    const moves: Record<string, number> = {
      ArrowDown: index + 1,
      ArrowUp: index - 1,
      PageDown: index + page,
      PageUp: index - page,
      Home: 0,
      End: rows.length - 1,
    };
    const target = moves[e.key];
    if (target !== undefined) {
      e.preventDefault();
      moveTo(target);
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      props.open(cluster);
    }
  };

  const slice = rows.slice(start, end);
  return (
    <section class="fleet" aria-label="Clusters">
      <div class="toolbar">
        <label class="filter">
          <span>Filter</span>
          <input
            type="search"
            data-testid="fleet-filter"
            placeholder="cluster name"
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
          />
        </label>
        <label class="toggle">
          <input
            type="checkbox"
            data-testid="fleet-only-unavailable"
            checked={onlyUnavailable}
            onChange={(e) => setOnlyUnavailable(e.currentTarget.checked)}
          />
          <span>only unavailable</span>
        </label>
        <output class="count" data-testid="fleet-count" aria-live="polite">
          {rows.length} of {props.rows.length} clusters
        </output>
      </div>
      <div
        class="table-scroll"
        ref={scroller}
        onScroll={(e) => setScrollTop(e.currentTarget.scrollTop)}
        data-testid="fleet-scroll"
      >
        <table class="fleet-table" data-testid="fleet-table" aria-rowcount={rows.length + 1}>
          <colgroup>
            <col class="c-cluster" />
            <col class="c-installed" />
            <col class="c-available" />
            <col class="c-latency" />
            <col class="c-agents" />
            <col class="c-expiry" />
            <col class="c-change" />
          </colgroup>
          <thead>
            <tr aria-rowindex={1}>
              {columns.map((c) => (
                <th
                  key={c.key}
                  scope="col"
                  aria-sort={order.key === c.key ? (order.descending ? "descending" : "ascending") : "none"}
                >
                  <button type="button" data-testid={`sort-${c.key}`} onClick={() => sortBy(c.key)}>
                    {c.label}
                    <span class="sort-mark" aria-hidden="true">
                      {order.key === c.key ? (order.descending ? "▼" : "▲") : ""}
                    </span>
                  </button>
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {start > 0 && (
              <tr class="spacer" aria-hidden="true">
                <td colSpan={columns.length} style={{ height: `${start * ROW_HEIGHT}px` }} />
              </tr>
            )}
            {slice.map((r, k) => {
              const index = start + k;
              return (
                <tr
                  key={r.cluster}
                  data-testid="fleet-row"
                  data-cluster={r.cluster}
                  data-available={r.available}
                  data-index={index}
                  aria-rowindex={index + 2}
                  aria-current={props.selected === r.cluster ? "true" : undefined}
                  class={props.selected === r.cluster ? "row selected" : "row"}
                  tabIndex={index === tabbable ? 0 : -1}
                  onClick={() => {
                    setActive(index);
                    props.open(r.cluster);
                  }}
                  onFocus={() => setActive(index)}
                  onKeyDown={(e) => onRowKey(e, index, r.cluster)}
                >
                  {columns.map((c) => (
                    <td key={c.key}>{c.cell(r, props.now)}</td>
                  ))}
                </tr>
              );
            })}
            {end < rows.length && (
              <tr class="spacer" aria-hidden="true">
                <td colSpan={columns.length} style={{ height: `${(rows.length - end) * ROW_HEIGHT}px` }} />
              </tr>
            )}
          </tbody>
        </table>
        {rows.length === 0 && (
          <p class="empty">{props.rows.length === 0 ? "No clusters to show." : "No cluster matches the filter."}</p>
        )}
      </div>
    </section>
  );
}
