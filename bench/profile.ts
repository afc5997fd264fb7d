/**
 * Summary of a V8 .cpuprofile (`node --cpu-prof`): self time per function and per area
 * (our packages, node internals, GC, idle), and the time spent in or under each of our source
 * files (what each of our modules costs, with the node work it asks for), as plain text.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  hitCount?: number;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples?: number[];
  timeDeltas?: number[];
  startTime: number;
  endTime: number;
}

function area(url: string, fn: string): string {
  if (fn === "(garbage collector)") return "GC";
  if (fn === "(idle)") return "idle";
  if (fn === "(program)") return "(program: native, outside JS)";
  if (url.includes("/packages/")) return `ours: ${/packages\/([^/]+)/.exec(url)?.[1] ?? "?"}`;
  if (url.startsWith("node:")) return `node: ${url.slice(5).split("/").slice(0, 2).join("/")}`;
  if (url.includes("node_modules")) return `dep: ${/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1] ?? "?"}`;
  return url ? "other" : "native/builtin";
}

function shortUrl(url: string): string {
  const i = url.indexOf("/packages/");
  if (i >= 0) return url.slice(i + 1);
  return url.replace(/^file:\/\//, "");
}

export function summarizeProfile(
  json: string,
  top: number,
  what = "Our proxy-server under node --cpu-prof during bulk transfers",
): string {
  const p = JSON.parse(json) as CpuProfile;
  const self = new Map<number, number>();
  if (p.samples && p.timeDeltas) {
    for (let i = 0; i < p.samples.length; i++) {
      const id = p.samples[i]!;
      self.set(id, (self.get(id) ?? 0) + Math.max(0, p.timeDeltas[i] ?? 0));
    }
  } else {
    const interval =
      (p.endTime - p.startTime) /
      Math.max(
        1,
        p.nodes.reduce((a, n) => a + (n.hitCount ?? 0), 0),
      );
    for (const n of p.nodes) self.set(n.id, (n.hitCount ?? 0) * interval);
  }
  const byFn = new Map<string, number>();
  const byArea = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (const n of p.nodes) {
    const t = self.get(n.id) ?? 0;
    if (t === 0) continue;
    const cf = n.callFrame;
    total += t;
    if (cf.functionName === "(idle)") idle += t;
    const key = `${cf.functionName || "(anonymous)"}  ${shortUrl(cf.url)}${cf.url ? `:${cf.lineNumber + 1}` : ""}`;
    byFn.set(key, (byFn.get(key) ?? 0) + t);
    const a = area(cf.url, cf.functionName);
    byArea.set(a, (byArea.get(a) ?? 0) + t);
  }
  const busy = total - idle;
  const pct = (t: number): string => `${((t / busy) * 100).toFixed(1).padStart(5)}%`;
  const lines: string[] = [];
  lines.push(
    `${what}: ${(total / 1e6).toFixed(1)} s profiled, ` +
      `${(busy / 1e6).toFixed(1)} s busy (percentages are of busy time).`,
  );
  lines.push("", "Self time by area:");
  for (const [k, v] of [...byArea]
    .filter(([k]) => k !== "idle")
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)) {
    lines.push(`  ${pct(v)}  ${k}`);
  }
  lines.push("", `Top ${top} functions by self time:`);
  for (const [k, v] of [...byFn]
    .filter(([k]) => !k.startsWith("(idle)"))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)) {
    lines.push(`  ${pct(v)}  ${k}`);
  }
  const files = inclusiveByFile(p, self);
  lines.push("", `Our source files by time in or under them (a sample counts once per file on its stack):`);
  for (const [k, v] of [...files].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`  ${pct(v)}  ${k}`);
  return `${lines.join("\n")}\n`;
}

/**
 * Time of each of our source files with one of its functions anywhere on the stack. Code of the
 * agent's bundle is traced back to its file by the `// packages/...` comment esbuild puts before
 * each module.
 */
function inclusiveByFile(p: CpuProfile, self: Map<number, number>): Map<string, number> {
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const modules = new Map<string, { line: number; file: string }[]>();
  const fileOf = (cf: CallFrame): string | undefined => {
    if (!cf.url.includes("/packages/")) return undefined;
    if (!/agent-bundle-[^/]+\.js$/.test(cf.url)) return shortUrl(cf.url);
    let starts = modules.get(cf.url);
    if (!starts) {
      starts = [];
      const text = readFileSync(cf.url.startsWith("file:") ? fileURLToPath(cf.url) : cf.url, "utf8");
      text.split("\n").forEach((line, i) => {
        const m = /^\/\/ (packages\/\S+)$/.exec(line);
        if (m) starts!.push({ line: i, file: m[1]! });
      });
      modules.set(cf.url, starts);
    }
    let file: string | undefined;
    for (const s of starts) if (s.line <= cf.lineNumber) file = s.file;
    return file ?? shortUrl(cf.url);
  };
  const files = new Map<string, number>();
  for (const [id, t] of self) {
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const file = fileOf(byId.get(at)!.callFrame);
      if (file) seen.add(file);
    }
    for (const f of seen) files.set(f, (files.get(f) ?? 0) + t);
  }
  return files;
}
