/**
 * A process's resource figures, for operators (and the fault suite) hunting leaks: memory,
 * optionally right after a full garbage collection, open file descriptors, Node's active handles
 * by type and garbage collections by kind. Server and agent serve them as JSON on the admin
 * port's `/debug/process` when `--enable-profiling` is set: the counterpart of the Go binaries'
 * `/debug/pprof/heap?gc=1`.
 */
import { readdirSync } from "node:fs";
import type * as http from "node:http";

export interface ProcessStats {
  rssBytes: number;
  heapUsedBytes: number;
  externalBytes: number;
  arrayBuffersBytes: number;
  /** Entries of /proc/self/fd (null where there is no /proc). */
  openFds: number | null;
  /**
   * `process.getActiveResourcesInfo()` counted by type: sockets, servers, HTTP/2 sessions and
   * referenced timers (`Timeout`). Unreferenced timers do not appear; their leaks show as heap.
   */
  activeResources: Record<string, number>;
  /**
   * Garbage collections by kind since {@link processStatsHandler} was first called; null before. `major` are full mark-compacts: a relay that runs dozens per GB
   * is short of old-space headroom (cluster-proxy's NODE_FLAGS).
   */
  gc: GcCounts | null;
}

export interface GcCounts {
  minor: number;
  major: number;
  incremental: number;
  weakcb: number;
}

let gcCounts: GcCounts | undefined;

/** Count this process's garbage collections by kind from now on (idempotent, process-wide). */
function countGarbageCollections(): void {
  if (gcCounts) return;
  // node:perf_hooks, node:v8 and node:vm load on first use: a process without --enable-profiling
  // never needs them (11 modules: an idle agent holds ~0.2 MiB less RSS; docs/design/performance-notes.md).
  const { PerformanceObserver, constants: perf } = process.getBuiltinModule("node:perf_hooks");
  const counts: GcCounts = { minor: 0, major: 0, incremental: 0, weakcb: 0 };
  const kinds = new Map<number, keyof GcCounts>([
    [perf.NODE_PERFORMANCE_GC_MINOR, "minor"],
    [perf.NODE_PERFORMANCE_GC_MAJOR, "major"],
    [perf.NODE_PERFORMANCE_GC_INCREMENTAL, "incremental"],
    [perf.NODE_PERFORMANCE_GC_WEAKCB, "weakcb"],
  ]);
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const detail = (entry as { detail?: { kind?: number } }).detail;
      const kind = detail?.kind === undefined ? undefined : kinds.get(detail.kind);
      if (kind) counts[kind]++;
    }
  }).observe({ entryTypes: ["gc"] });
  gcCounts = counts;
}

let collect: (() => void) | undefined;

/** Run a full, synchronous garbage collection (exposing V8's `gc` on first use). */
export function fullGarbageCollection(): void {
  if (!collect) {
    const exposed = (globalThis as { gc?: () => void }).gc;
    if (exposed) collect = exposed;
    else {
      process.getBuiltinModule("node:v8").setFlagsFromString("--expose-gc");
      collect = process.getBuiltinModule("node:vm").runInNewContext("gc") as () => void;
    }
  }
  collect();
}

/**
 * Open file descriptors of process `pid` (default: this one) from /proc; null where there is no
 * /proc or the process is gone.
 */
export function countOpenFds(pid?: number): number | null {
  try {
    // Reading our own fd directory opens one more descriptor while it is listed.
    return pid === undefined ? readdirSync("/proc/self/fd").length - 1 : readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return null;
  }
}

/** This process's figures now; `gc` first runs a full collection so the heap holds only live objects. */
export function processStats(opts: { gc?: boolean } = {}): ProcessStats {
  if (opts.gc) fullGarbageCollection();
  const mem = process.memoryUsage();
  const activeResources: Record<string, number> = {};
  for (const type of process.getActiveResourcesInfo()) activeResources[type] = (activeResources[type] ?? 0) + 1;
  return {
    rssBytes: mem.rss,
    heapUsedBytes: mem.heapUsed,
    externalBytes: mem.external,
    arrayBuffersBytes: mem.arrayBuffers,
    openFds: countOpenFds(),
    activeResources,
    gc: gcCounts ? { ...gcCounts } : null,
  };
}

/** The path admin ports serve {@link processStats} on (`?gc=1` collects garbage first). */
export const PROCESS_STATS_PATH = "/debug/process";

/** The handler of {@link PROCESS_STATS_PATH}; garbage collections are counted from this call on. */
export function processStatsHandler(): http.RequestListener {
  countGarbageCollections();
  return serveProcessStats;
}

/** Answer a `/debug/process` request with the JSON of {@link processStats}. */
function serveProcessStats(req: http.IncomingMessage, res: http.ServerResponse): void {
  const gc = new URL(req.url ?? "/", "http://admin").searchParams.get("gc") === "1";
  const body = `${JSON.stringify(processStats({ gc }))}\n`;
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}
