/**
 * Where a process's CPU goes, by category, from Linux `perf` samples: for comparing our server
 * and agent with Go's on the same transfer (`hotpath.ts bulk --perf`). Samples cover every thread
 * of the process (V8's GC helpers, Go's goroutines), like the CPU seconds they are scaled to.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";

/** Categories in match order: a symbol counts for the first whose pattern it matches. */
export const PERF_CATEGORIES: readonly { name: string; match: (sym: string) => boolean }[] = [
  {
    name: "TLS: AES-GCM and record layer",
    match: (s) => /aes|gcm|ghash|ctr32|EVP_|ossl_|ssl3|SSL_|ssl_|tls1|BIO|TLSWrap|crypto[/:]|fips140/i.test(s),
  },
  { name: "kernel: TCP, syscalls, copies", match: (s) => s.startsWith("[k]") },
  { name: "memcpy / memclr", match: (s) => /memmove|memcpy|memclr|memset/.test(s) },
  {
    name: "malloc / free",
    match: (s) =>
      /malloc|_int_free|\] free$|cfree|unlink_chunk|fixalloc|ArrayBufferAllocator|BackingStore::|tcache/.test(s),
  },
  {
    name: "garbage collection",
    match: (s) =>
      /v8::internal::(Heap|Mark|Sweep|Scaveng|Evacuat|Concurrent|Incremental|ArrayBufferSweeper|MemoryChunk|SemiSpace|PagedSpace|GlobalHandles|FreeList|Minor|Main|Young|Full)|SizeFromMap|IteratePointers|runtime\.(gc|scan|mark|sweep|newMarkBits|findObject|greyobject|tryDeferToSpanScan|heapBits|spanOf|wbBuf|bulkBarrier)/.test(
        s,
      ),
  },
  { name: "HTTP/2 and gRPC framing", match: (s) => /nghttp2|http2|Http2|grpc|golang\.org\/x\/net|hpack/.test(s) },
  { name: "other: JS / Go code, runtime, event loop", match: () => true },
];

/** Whether `perf record` works here (installed, and allowed to sample other processes). */
export function perfAvailable(): boolean {
  const r = spawnSync("perf", ["record", "-q", "-o", "/dev/null", "--", "true"], { stdio: "ignore" });
  return r.status === 0;
}

/** Sample process `pid` into `file` until {@link stopPerf}. */
export function startPerf(pid: number, file: string): ChildProcess {
  return spawn("perf", ["record", "-q", "-F", "999", "-p", String(pid), "-o", file], { stdio: "ignore" });
}

/** Stop a recording and wait until perf has written its file (bounded: 20 s). */
export async function stopPerf(perf: ChildProcess): Promise<void> {
  if (perf.exitCode !== null || perf.signalCode !== null) return;
  perf.kill("SIGINT");
  const timer = setTimeout(() => perf.kill("SIGKILL"), 20_000);
  await once(perf, "exit");
  clearTimeout(timer);
}

/** Share of samples (0-1) per symbol (`[.] name` in user space, `[k] name` in the kernel) in a recording. */
export function perfSymbols(file: string): Map<string, number> {
  const r = spawnSync("perf", ["report", "-i", file, "--no-children", "--sort", "sym", "--stdio", "-g", "none"], {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  const shares = new Map<string, number>();
  for (const line of r.stdout.split("\n")) {
    const m = /^\s+([\d.]+)%\s+(\[.\] .*)$/.exec(line);
    if (!m) continue;
    const sym = m[2]!.trim();
    shares.set(sym, (shares.get(sym) ?? 0) + Number(m[1]) / 100);
  }
  return shares;
}

/** Share of samples (0-1) per category name in a recording. */
export function perfCategories(file: string): Map<string, number> {
  return categoriesOf(perfSymbols(file));
}

/** Symbol shares summed per category of {@link PERF_CATEGORIES}. */
export function categoriesOf(symbols: Map<string, number>): Map<string, number> {
  const shares = new Map<string, number>(PERF_CATEGORIES.map((c) => [c.name, 0]));
  for (const [sym, share] of symbols) {
    const category = PERF_CATEGORIES.find((c) => c.match(sym))!;
    shares.set(category.name, shares.get(category.name)! + share);
  }
  return shares;
}
