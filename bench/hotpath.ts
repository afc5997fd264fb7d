/**
 * Focused measurements for work on the data plane (not part of `npm run bench`): one scenario
 * at a time, paths alternating round by round in the same run, with the CPU each process spends
 * per operation and, with `--prof`, V8 CPU profiles of our server and agent summarised by self
 * time (bench/profile.ts).
 *
 *   hotpath.ts dialrate [--secs=10] [--conc=16] [--perf]   dial, 16 B echo, close; CPU ms per dial;
 *                                                 with --perf, server's and agent's CPU us per dial by
 *                                                 category (Linux perf samples of every thread)
 *   hotpath.ts firstbyte [--count=200]             new connection to first echoed byte, single-use
 *                                                 tunnel and reusable client; p50 and CPU ms per connection;
 *                                                 with the Go client on every path and a plain node
 *                                                 client (client-floor.ts) on ours and the floor, each
 *                                                 over the Go client through Go's server
 *   hotpath.ts many [--conns=64] [--secs=3] [--per-conn]   concurrent downloads, fairness
 *   hotpath.ts bulk [--mib=512] [--perf] [--gc]   one connection each way; CPU s per GB; with --perf,
 *                                                 server's and agent's CPU s per GB by category
 *                                                 (Linux perf; writes results/perf-bulk.json); with
 *                                                 --gc, their full (mark-compact) collections per GB
 *                                                 (node --trace-gc; not for the Go path)
 *   hotpath.ts agents [--agents=1000] [--procs=4] [--settle=120]   idle agents: server RSS per
 *                                                 agent, connect time (--prof: our server's profile)
 *   hotpath.ts agentrss [--variants="a|b"] [--at=5,30]   our idle agent's RSS (RssFile/RssAnon) with
 *                                                 each variant of extra agent node flags ("" = the
 *                                                 CLI's flags alone; `cli=<main.js>`: the agent runs
 *                                                 that build), variants alternating round by round
 *   hotpath.ts handshakes [--count=300]           TLS handshakes at the agent door with an agent
 *                                                 certificate, full and resumed (a ticket of the
 *                                                 first), taking turns, one at a time; server CPU ms
 *                                                 per handshake of ours, the floor (plain node TLS:
 *                                                 relay-floor.ts handshakes) and Go's (full only: it
 *                                                 issues no ticket to resume); ours/floor, and
 *                                                 resumed/full: the handshake pacer's cost of a
 *                                                 resumption (RESUMED_HANDSHAKE_COST); --prof: our
 *                                                 server's profile; --perf: each server's CPU us per
 *                                                 handshake by category (Linux perf), and the
 *                                                 symbols ours spends most above each floor on;
 *                                                 path floorh2: the floor with node's HTTP/2
 *                                                 server on its TLS (relay-floor.ts handshakes-h2);
 *                                                 --kinds=resumed: only those handshakes
 *   hotpath.ts storm [--agents=1000] [--procs=4]   reconnect storm (--prof: our server's profile): load agents connect, then all
 *                                                 reconnect at once (ours resuming TLS sessions,
 *                                                 Go's not); seconds until all are back, server CPU
 *   hotpath.ts summary <file.cpuprofile> [top]    summarise a profile
 *
 * Common: --rounds=3, --paths=ours,go (`floor`: bench/relay-floor.ts, `floorsrv`: its server with our agent; add `ours2` for an A/B of two builds or flag sets of ours:
 * --ours2-cli=<other build's packages/cli/dist/main.js>, --ours2-server-node-args="...",
 * --ours2-agent-node-args="...", --ours2-server-args="<server flags>"), --server-node-args="..." / --agent-node-args="..." for ours,
 * --prof [--top=25] (profiles of ours, floor and floorsrv; handshakes and dialrate keep them in --prof-dir=<dir>), --abba (reverse the order of the paths every other round). Run from bench/ with `"$(node ../scripts/node-runtime.mjs)" --conditions=source --import tsx hotpath.ts ...`
 * (on the Node.js the image ships; every process it starts runs on the same node) after `npm run
 * build` (the processes run the built CLI). Everything started is killed by PID.
 */
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as tls from "node:tls";
import { join } from "node:path";
import { writeStandaloneCerts } from "@cluster-proxy/pki";
import { RESUMED_HANDSHAKE_COST } from "@cluster-proxy/server";
import { Harness } from "../test/framework/harness.js";
import { type Proc } from "../test/framework/process.js";
import { goBin } from "../test/framework/go-harness.js";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import {
  BENCH,
  LOOPBACK,
  MiB,
  CLUSTER,
  TS_NODE,
  agentFleet,
  bulk,
  cpuSeconds,
  dialRate,
  firstByte,
  firstJsonLine,
  goClientFirstBytes,
  manyBytes,
  opener,
  percentileOf,
  selfCpuSeconds,
  singleUseOpener,
  sleep,
  startGo,
  startOurs,
  startRelayFloor,
  startTarget,
  type Opener,
  type Stack,
  type StackOptions,
} from "./lib.js";
import {
  PERF_CATEGORIES,
  categoriesOf,
  perfAvailable,
  perfCategories,
  perfSymbols,
  startPerf,
  stopPerf,
} from "./perf-categories.js";
import { clientFloorFirstBytes } from "./client-floor.js";
import { summarizeProfile } from "./profile.js";

const argv = process.argv.slice(2);
const scenario = argv[0] ?? "dialrate";
const opt = (name: string): string | undefined => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const num = (name: string, dflt: number): number => Number(opt(name) ?? dflt);
const flag = (name: string): boolean => argv.includes(`--${name}`);
const words = (name: string): string[] => (opt(name) ?? "").split(" ").filter(Boolean);
const log = (s: string): void => void process.stderr.write(`${s}\n`);

if (scenario === "summary") {
  log(summarizeProfile(readFileSync(argv[1]!, "utf8"), Number(argv[2] ?? 25), "Profile"));
  process.exit(0);
}

type Path = "ours" | "ours2" | "go" | "floor" | "floorsrv" | "floorh2";
const paths = (opt("paths") ?? "ours,go").split(",") as Path[];
const rounds = num("rounds", 3);
/** The paths in round `r`: reversed every other round with --abba (cancels an order effect). */
/** The paths of round `r` (`list`, reversed every other round with --abba). */
const order = (r: number, list: Path[] = paths): Path[] => (flag("abba") && r % 2 === 1 ? [...list].reverse() : list);
/** Where --prof profiles go: --prof-dir (kept), or the run's directory. */
const profDirOf = (): string | undefined => opt("prof-dir") ?? (flag("prof") ? join(h.dir, "prof") : undefined);
const h = new Harness();
process.on("SIGINT", () => void h.close().then(() => process.exit(130)));

interface Cpu {
  client: number;
  server: number;
  agent: number;
  target: number;
}
function cpuOf(st: Stack, targetPid: number | undefined): Cpu {
  return {
    client: selfCpuSeconds(),
    server: cpuSeconds(st.server.child.pid),
    agent: cpuSeconds(st.agent?.child.pid),
    target: cpuSeconds(targetPid),
  };
}
function perOp(a: Cpu, b: Cpu, ops: number, unit: number): string {
  const f = (k: keyof Cpu): string => (((b[k] - a[k]) / ops) * unit).toFixed(3);
  return `client ${f("client")} server ${f("server")} agent ${f("agent")} target ${f("target")}`;
}

/** Node flags that write a CPU profile of `who` (server, agent) of `path` under `profDir`. */
function profArgs(profDir: string | undefined, path: Path, who: string): string[] {
  if (!profDir) return [];
  mkdirSync(join(profDir, path, who), { recursive: true });
  return ["--cpu-prof", `--cpu-prof-dir=${join(profDir, path, who)}`];
}

/** Our stack of `path` (ours or ours2) with its options. */
function oursOptions(path: "ours" | "ours2", profDir: string | undefined, noAgent = false): StackOptions {
  const gc = scenario === "bulk" && flag("gc") ? ["--trace-gc"] : [];
  if (path === "ours2") {
    const cli = opt("ours2-cli");
    return {
      noAgent,
      serverNodeArgs: [...gc, ...words("ours2-server-node-args")],
      agentNodeArgs: [...gc, ...words("ours2-agent-node-args")],
      serverArgs: words("ours2-server-args"),
      ...(cli ? { cli } : {}),
    };
  }
  return {
    noAgent,
    serverNodeArgs: [...profArgs(profDir, path, "server"), ...gc, ...words("server-node-args")],
    agentNodeArgs: [...profArgs(profDir, path, "agent"), ...gc, ...words("agent-node-args")],
  };
}

/** How many full collections (`Mark-Compact` lines of node's --trace-gc) `proc` has reported since this call. */
function markCompacts(proc: Proc | undefined): () => number {
  let n = 0;
  let partial = "";
  proc?.child.stdout?.on("data", (c: Buffer) => {
    const lines = (partial + c.toString()).split("\n");
    partial = lines.pop()!;
    n += lines.filter((l) => l.includes("Mark-Compact")).length;
  });
  return () => n;
}

async function startPath(path: Path, bin: string, profDir: string | undefined, noAgent = false): Promise<Stack> {
  if (path === "floorh2") throw new Error("path floorh2 is for the handshakes scenario only");
  if (path === "floor" || path === "floorsrv") {
    return startRelayFloor(h, {
      serverNodeArgs: profArgs(profDir, path, "server"),
      agentNodeArgs: profArgs(profDir, path, "agent"),
      ...(path === "floorsrv" ? { ourAgent: {} } : {}),
    });
  }
  return path === "go"
    ? startGo(h, LOOPBACK, bin, { noAgent })
    : startOurs(h, LOOPBACK, oursOptions(path, profDir, noAgent));
}

/** Stop a profiled stack gracefully (SIGTERM) so node writes its profiles, then print them. */
async function stopAndSummarise(st: Stack, dir: string): Promise<void> {
  await st.client.close().catch(() => undefined);
  for (const p of [st.agent, st.server]) {
    if (!p) continue;
    p.child.kill("SIGTERM");
    await Promise.race([p.exited, sleep(15_000)]);
  }
  await st.stop();
  for (const who of ["server", "agent"]) {
    for (const f of readdirSync(join(dir, who)).filter((x) => x.endsWith(".cpuprofile"))) {
      log(`\n${summarizeProfile(readFileSync(join(dir, who, f), "utf8"), num("top", 25), `${st.path} ${who} (${f})`)}`);
    }
  }
}

async function agents(bin: string): Promise<void> {
  const n = num("agents", 1000);
  const settleMs = num("settle", 0) * 1000;
  const procs = num("procs", Math.min(4, Math.ceil(n / 250)));
  for (let r = 0; r < rounds; r++) {
    for (const path of paths) {
      const profDir = flag("prof") && (path === "ours" || path === "ours2") ? join(h.dir, `prof-${r}`) : undefined;
      const st = await startPath(path, bin, profDir, true);
      try {
        const fleet = await agentFleet(h, st, n, procs, 3000, "host=bench");
        try {
          if (settleMs > 0) await fleet.settle(settleMs);
          if (flag("smaps")) log(`server smaps [${path}]:\n${smapsSummary(st.server.child.pid)}`);
          const x = fleet.result;
          const kib = (b: number | undefined): string => ((b ?? NaN) / 1024).toFixed(1);
          log(
            `round ${r + 1} ${path}: ${x.agents} agents, baseline ${x.baselineRssMiB.toFixed(1)} MiB, ` +
              `RSS ${x.rssMiB.toFixed(1)} MiB: ${kib(x.bytesPerAgent)} KiB/agent ` +
              `(second half ${kib(x.marginalBytesPerAgent)}, peak while connecting ${kib(x.peakBytesPerAgent)})` +
              (x.settledAfterS !== undefined
                ? `; after ${x.settledAfterS} s idle ${kib(x.settledBytesPerAgent)}`
                : "") +
              `; connect ${x.connectSeconds.toFixed(1)} s, CPU ms per agent: server ${x.serverCpuMsPerAgent?.toFixed(2)}, ` +
              `load agents ${x.loadAgentCpuMsPerAgent?.toFixed(2)}`,
          );
        } finally {
          await fleet.release();
        }
      } finally {
        if (profDir) await stopAndSummarise(st, join(profDir, path));
        else await st.stop();
      }
    }
  }
}

/**
 * The reconnect storm: `--agents` load agents connect (full handshakes), then all drop their
 * connections and reconnect at once, ours resuming their TLS sessions (each agent its own cache,
 * as our agent keeps one), Go's not (the Go proxy-agent keeps no session cache). The server is the
 * same process before and after: with the replicas' shared ticket key file a restarted one resumes
 * the same tickets, and here it also tears the old connections down while the new ones arrive.
 */
async function storm(bin: string): Promise<void> {
  const n = num("agents", 1000);
  const procs = num("procs", Math.min(4, Math.ceil(n / 250)));
  const seconds: Partial<Record<Path, number[]>> = {};
  for (let r = 0; r < rounds; r++) {
    for (const path of order(r)) {
      const profDir = flag("prof") && (path === "ours" || path === "ours2") ? join(h.dir, `prof-${r}`) : undefined;
      const st = await startPath(path, bin, profDir, true);
      try {
        const fleet = await agentFleet(h, st, n, procs, 1000, "host=bench", CLUSTER, { resume: path !== "go" });
        try {
          const x = await fleet.reconnect();
          (seconds[path] ??= []).push(x.seconds);
          log(
            `round ${r + 1} ${path}: connect ${fleet.result.connectSeconds.toFixed(1)} s ` +
              `(server ${fleet.result.serverCpuMsPerAgent?.toFixed(2)} ms CPU per agent); reconnect storm ` +
              `${x.seconds.toFixed(1)} s, ${x.resumed} of ${x.agents} resumed, server ${x.serverCpuMsPerAgent.toFixed(2)} ms CPU per agent`,
          );
        } finally {
          await fleet.release();
        }
      } finally {
        if (profDir) await stopAndSummarise(st, join(profDir, path));
        else await st.stop();
      }
    }
  }
  for (const path of paths) {
    const med = percentileOf(seconds[path] ?? [], 50);
    const go = seconds.go ? percentileOf(seconds.go, 50) : NaN;
    log(`${path}: reconnect storm median ${med.toFixed(1)} s${seconds.go ? ` (${(med / go).toFixed(2)}x Go)` : ""}`);
  }
}

/** kB fields of /proc/<pid>/status (VmRSS, RssAnon, RssFile), in MiB. */
function procStatusMiB(pid: number | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  try {
    for (const m of readFileSync(`/proc/${pid}/status`, "utf8").matchAll(/^(VmRSS|RssAnon|RssFile):\s+(\d+) kB/gm)) {
      out[m[1]!] = Number(m[2]) / 1024;
    }
  } catch {
    // exited
  }
  return out;
}

/** RSS by mapping (file name, or [heap]/[anon]) of /proc/<pid>/smaps, largest first, in MiB. */
function smapsSummary(pid: number | undefined): string {
  const by = new Map<string, number>();
  let name = "";
  try {
    for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
      const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
      if (head) name = head[1] || "[anon]";
      const rss = /^Rss:\s+(\d+) kB/.exec(line);
      if (rss) by.set(name, (by.get(name) ?? 0) + Number(rss[1]) / 1024);
    }
  } catch {
    return "(gone)";
  }
  return [...by]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 12)
    .map(([n, m]) => `  ${m.toFixed(1)}  ${n}`)
    .join("\n");
}

async function agentRss(bin: string): Promise<void> {
  const variants = (opt("variants") ?? "").split("|").map((v) => v.split(" ").filter(Boolean));
  const at = (opt("at") ?? "5,30").split(",").map(Number);
  const seen: Record<string, Record<number, number[]>> = {};
  for (let r = 0; r < rounds; r++) {
    for (const v of r % 2 === 1 ? [...variants].reverse() : variants) {
      const name = v.join(" ") || "(CLI flags only)";
      const floor = v[0] === "floor";
      // `cli=<path>`: the agent runs that build of the CLI (e.g. another checkout's dist/main.js).
      const cli = v.find((a) => a.startsWith("cli="))?.slice("cli=".length);
      const nodeArgs = v.filter((a) => !a.startsWith("cli="));
      const st =
        v[0] === "go"
          ? await startGo(h, LOOPBACK, bin)
          : await startOurs(h, LOOPBACK, floor ? { noAgent: true } : { agentNodeArgs: nodeArgs, agentCli: cli });
      // "floor": plain node holding one mTLS HTTP/2 session (bench/node-tunnel-floor.mjs), with the given node flags.
      const agentCert = h.certs.agents.get("bench")!;
      const floorProc = floor
        ? h.spawnProc("node-tunnel-floor", process.execPath, [
            ...v.slice(1),
            join(import.meta.dirname, "node-tunnel-floor.mjs"),
            LOOPBACK.agentServerHost,
            String(st.agentPort),
            h.certs.ca.cert,
            agentCert.cert,
            agentCert.key,
          ])
        : undefined;
      const pid = floorProc ? floorProc.child.pid : st.agent?.child.pid;
      const t0 = performance.now();
      const line: string[] = [];
      try {
        for (const s of at) {
          await sleep(t0 + s * 1000 - performance.now());
          const st2 = procStatusMiB(pid);
          if (st2["VmRSS"] === undefined) log(`process gone: ${floorProc?.output() ?? st.agent?.output()}`);
          ((seen[name] ??= {})[s] ??= []).push(st2["VmRSS"] ?? NaN);
          line.push(
            `${s}s: RSS ${st2["VmRSS"]?.toFixed(1)} (file ${st2["RssFile"]?.toFixed(1)}, anon ${st2["RssAnon"]?.toFixed(1)})`,
          );
        }
        if (flag("smaps")) log(`smaps [${v.join(" ")}]:\n${smapsSummary(pid)}`);
      } finally {
        await floorProc?.kill("SIGKILL");
        await st.stop();
      }
      log(`round ${r + 1} [${name}]: ${line.join("; ")} MiB`);
    }
  }
  for (const [name, bySec] of Object.entries(seen)) {
    log(
      `median [${name}]: ${Object.entries(bySec)
        .map(([s, v]) => `${s}s ${percentileOf(v, 50).toFixed(1)}`)
        .join(", ")} MiB`,
    );
  }
}

/** Print and save the mean CPU s/GB by category of each path's server and agent (bulk --perf). */
function reportPerf(sums: Record<string, Record<string, Record<string, number>>>): void {
  const columns = Object.entries(sums).flatMap(([path, byProc]) =>
    Object.keys(byProc).map((proc) => ({ label: `${path} ${proc}`, cats: byProc[proc]! })),
  );
  const mean = (cats: Record<string, number>, cat: string): number => (cats[cat] ?? 0) / rounds;
  const rows = [...PERF_CATEGORIES.map((c) => c.name), "total"];
  const value = (cats: Record<string, number>, row: string): number =>
    row === "total" ? Object.values(cats).reduce((a, b) => a + b, 0) / rounds : mean(cats, row);
  log(`\nCPU s per GB by category (Linux perf samples, mean of ${rounds} rounds)`);
  log(`| category | ${columns.map((c) => c.label).join(" | ")} |`);
  log(`| --- | ${columns.map(() => "---").join(" | ")} |`);
  for (const row of rows) log(`| ${row} | ${columns.map((c) => value(c.cats, row).toFixed(2)).join(" | ")} |`);
  const json = Object.fromEntries(
    columns.map((c) => [c.label, Object.fromEntries(rows.map((row) => [row, Number(value(c.cats, row).toFixed(3))]))]),
  );
  const file = join(import.meta.dirname, "results", "perf-bulk.json");
  writeFileSync(file, `${JSON.stringify({ unit: "CPU s/GB", rounds, mib: num("mib", 512), paths: json }, null, 2)}\n`);
  log(`wrote ${file}`);
}

/** One TLS handshake to `port` (with `session`: offering its ticket); resolves with whether it resumed and the session it got. */
async function handshake(
  port: number,
  options: tls.ConnectionOptions,
  session?: Buffer,
): Promise<{ resumed: boolean; session: Buffer | undefined }> {
  const socket = tls.connect({
    host: "127.0.0.1",
    port,
    ALPNProtocols: ["h2"],
    ...options,
    ...(session ? { session } : {}),
  });
  try {
    const got = new Promise<Buffer | undefined>((resolve) => {
      socket.once("session", resolve);
      socket.once("close", () => resolve(undefined));
    });
    await new Promise<void>((resolve, reject) => {
      socket.once("secureConnect", resolve);
      socket.once("error", reject);
    });
    const resumed = socket.isSessionReused();
    // A TLS 1.3 ticket comes after the handshake; a full handshake's is the one to resume with.
    const ticket = session ? undefined : await Promise.race([got, sleep(2_000).then(() => undefined)]);
    return { resumed, session: ticket };
  } finally {
    socket.destroy();
  }
}

/** A server that only answers TLS handshakes at the agent door, with its CPU counter. */
interface HandshakeServer {
  port: number;
  pid: number | undefined;
  stop(): Promise<void>;
}

/** `path`'s agent door for `handshakes`: ours and Go's servers, or the floor's plain node TLS server. */
async function handshakeServer(path: Path, bin: string, profDir: string | undefined): Promise<HandshakeServer> {
  if (path === "floor" || path === "floorh2") {
    const c = h.certs;
    const proc = h.spawnProc("tls-floor", process.execPath, [
      ...NODE_FLAGS,
      ...TS_NODE,
      join(BENCH, "relay-floor.ts"),
      path === "floorh2" ? "handshakes-h2" : "handshakes",
      c.server.cert,
      c.server.key,
      c.agentCa.cert,
    ]);
    const { port } = await firstJsonLine<{ port: number }>(proc, "tls floor port");
    return {
      port,
      pid: proc.child.pid,
      stop: async () => {
        await proc.kill("SIGTERM");
      },
    };
  }
  const st =
    path === "go" ? await startGo(h, LOOPBACK, bin, { noAgent: true }) : await startPath(path, bin, profDir, true);
  return {
    port: st.agentPort,
    pid: st.server.child.pid,
    stop: () => (profDir && path === "ours" ? stopAndSummarise(st, join(profDir, path)) : st.stop()),
  };
}

/** See `handshakes` in the module comment: the server CPU of a full and a resumed handshake. */
async function handshakes(bin: string): Promise<void> {
  const count = num("count", 300);
  const servers = (opt("paths") ?? "ours,floor,go").split(",") as Path[];
  const profDir = profDirOf();
  const agentCert = h.certs.agents.get("bench")!;
  const options: tls.ConnectionOptions = {
    ca: readFileSync(h.certs.ca.cert),
    cert: readFileSync(agentCert.cert),
    key: readFileSync(agentCert.key),
  };
  const onlyKinds = (opt("kinds") ?? "full,resumed").split(",");
  const perf = flag("perf");
  if (perf && !perfAvailable()) throw new Error("--perf needs Linux perf allowed to sample other processes");
  /** `path kind` -> perf symbol -> server CPU us per handshake, summed over rounds (--perf). */
  const symbolUs: Record<string, Map<string, number>> = {};
  const perHandshake: Partial<Record<Path, Record<"full" | "resumed", number[]>>> = {};
  for (let r = 0; r < rounds; r++) {
    for (const path of order(r, servers)) {
      const server = await handshakeServer(path, bin, profDir);
      try {
        const { session } = await handshake(server.port, options);
        const kinds = r % 2 === 0 ? (["full", "resumed"] as const) : (["resumed", "full"] as const);
        for (const kind of kinds.filter((k) => onlyKinds.includes(k))) {
          // A server that issues no ticket (Go's proxy-server) has full handshakes only.
          if (kind === "resumed" && !session) continue;
          let resumedCount = 0;
          const file = join(h.dir, `perf-handshakes-${path}-${kind}-${r}.data`);
          const recording = perf ? startPerf(server.pid!, file) : undefined;
          if (recording) await sleep(300); // perf attaches before the handshakes start
          const c0 = cpuSeconds(server.pid);
          for (let i = 0; i < count; i++) {
            const x = await handshake(server.port, options, kind === "resumed" ? session : undefined);
            if (x.resumed) resumedCount++;
          }
          const ms = ((cpuSeconds(server.pid) - c0) / count) * 1000;
          if (recording) {
            await stopPerf(recording);
            const sums = (symbolUs[`${path} ${kind}`] ??= new Map());
            for (const [sym, share] of perfSymbols(file)) sums.set(sym, (sums.get(sym) ?? 0) + share * ms * 1000);
          }
          ((perHandshake[path] ??= { full: [], resumed: [] })[kind] ??= []).push(ms);
          log(
            `round ${r + 1} ${path} ${kind}: server CPU ${ms.toFixed(3)} ms per handshake (${resumedCount} of ${count} resumed)`,
          );
        }
      } finally {
        await server.stop();
      }
    }
  }
  const median = (xs: number[] | undefined): number => (xs?.length ? percentileOf(xs, 50) : NaN);
  for (const path of servers) {
    const x = perHandshake[path];
    if (!x) continue;
    const full = median(x.full);
    const resumed = median(x.resumed);
    const ratios = x.resumed.map((ms, i) => ms / x.full[i]!);
    const vsFloor = (["floor", "floorh2"] as const)
      .filter((f) => perHandshake[f] && path !== f)
      .map(
        (f) =>
          ` (${f}: ${(full / median(perHandshake[f]!.full)).toFixed(2)}x, ${(resumed / median(perHandshake[f]!.resumed)).toFixed(2)}x)`,
      )
      .join("");
    log(
      `${path}: median server CPU ${full.toFixed(3)} ms full, ${Number.isNaN(resumed) ? "-" : resumed.toFixed(3)} ms resumed${vsFloor}` +
        (ratios.length ? `; resumed/full ${percentileOf(ratios, 50).toFixed(3)}` : "") +
        (path === "ours" ? ` (the pacer charges ${RESUMED_HANDSHAKE_COST})` : ""),
    );
  }
  if (perf) reportHandshakePerf(symbolUs);
}

/**
 * `handshakes --perf`: server CPU us per handshake by category, then the symbols where ours and
 * the floor differ most (means over the rounds).
 */
function reportHandshakePerf(symbolUs: Record<string, Map<string, number>>): void {
  const mean = (m: Map<string, number>): Map<string, number> => new Map([...m].map(([sym, us]) => [sym, us / rounds]));
  const columns = Object.keys(symbolUs);
  const categories = Object.fromEntries(columns.map((c) => [c, categoriesOf(mean(symbolUs[c]!))]));
  log(`\nserver CPU us per handshake by category (Linux perf samples, mean of ${rounds} rounds)`);
  log(`| category | ${columns.join(" | ")} |`);
  log(`| --- | ${columns.map(() => "---").join(" | ")} |`);
  for (const row of [...PERF_CATEGORIES.map((c) => c.name), "total"]) {
    const value = (c: string): number =>
      row === "total" ? [...categories[c]!.values()].reduce((a, b) => a + b, 0) : (categories[c]!.get(row) ?? 0);
    log(`| ${row} | ${columns.map((c) => value(c).toFixed(0)).join(" | ")} |`);
  }
  for (const [kind, floorPath] of ["full", "resumed"].flatMap((k) => ["floor", "floorh2"].map((f) => [k, f]))) {
    const ours = symbolUs[`ours ${kind}`];
    const floor = symbolUs[`${floorPath} ${kind}`];
    if (!ours || !floor) continue;
    const diff = [...new Set([...ours.keys(), ...floor.keys()])]
      .map((sym) => ({ sym, ours: (ours.get(sym) ?? 0) / rounds, floor: (floor.get(sym) ?? 0) / rounds }))
      .sort((a, b) => b.ours - b.floor - (a.ours - a.floor));
    log(`\n${kind} handshakes: the 25 symbols ours spends most above ${floorPath} on (us per handshake)`);
    log(`| symbol | ours | floor | ours - floor |`);
    log(`| --- | --- | --- | --- |`);
    for (const d of diff.slice(0, 25))
      log(
        `| \`${d.sym.replace(/\|/g, "\\|").slice(0, 90)}\` | ${d.ours.toFixed(1)} | ${d.floor.toFixed(1)} | ${(d.ours - d.floor).toFixed(1)} |`,
      );
  }
}

async function main(): Promise<void> {
  const bin = goBin();
  h.dir = join(os.tmpdir(), `cphot-${process.pid}`);
  h.certs = await writeStandaloneCerts(join(h.dir, "pki"), {
    clusters: ["bench"],
    hubHosts: ["127.0.0.1", "localhost"],
  });
  if (scenario === "agents") return agents(bin);
  if (scenario === "agentrss") return agentRss(bin);
  if (scenario === "handshakes") return handshakes(bin);
  if (scenario === "storm") return storm(bin);
  const profDir = profDirOf();

  const target = await startTarget(h, LOOPBACK);
  const tpid = target.proc.child.pid;
  const stacks: Partial<Record<Path, Stack>> = {};
  for (const path of paths) stacks[path] = await startPath(path, bin, profDir);
  await sleep(1000);
  const open = (path: Path): Opener => opener(path === "go" ? "go" : "ours", LOOPBACK, stacks[path]);

  if (scenario === "dialrate") {
    const secs = num("secs", 10);
    const perf = flag("perf");
    if (perf && !perfAvailable()) throw new Error("--perf needs Linux perf allowed to sample other processes");
    const rates: Partial<Record<Path, number[]>> = {};
    // path -> process -> category -> CPU us per dial summed over rounds (--perf)
    const byCategory: Record<string, Record<string, Record<string, number>>> = {};
    for (let r = 0; r < rounds; r++) {
      for (const path of order(r)) {
        const st = stacks[path]!;
        const who = { server: st.server.child.pid, agent: st.agent?.child.pid };
        const recordings = perf
          ? Object.entries(who).map(([name, pid]) => {
              const file = join(h.dir, `perf-dial-${path}-${name}-${r}.data`);
              return { name, file, pid, proc: startPerf(pid!, file) };
            })
          : [];
        if (perf) await sleep(300); // perf attaches before the dials start
        const c0 = cpuOf(st, tpid);
        const res = await dialRate(open(path), target.echo, 1, secs * 1000, num("conc", 16));
        const c1 = cpuOf(st, tpid);
        const rate = res.windows[0]!;
        (rates[path] ??= []).push(rate);
        for (const rec of recordings) {
          await stopPerf(rec.proc);
          const usPerDial =
            ((rec.name === "server" ? c1.server - c0.server : c1.agent - c0.agent) / (rate * secs)) * 1e6;
          const sums = ((byCategory[path] ??= {})[rec.name] ??= {});
          for (const [cat, share] of perfCategories(rec.file)) sums[cat] = (sums[cat] ?? 0) + share * usPerDial;
        }
        log(
          `round ${r + 1} ${path}: ${rate.toFixed(0)} dials/s (errors ${res.errors}); CPU ms/dial: ` +
            perOp(c0, c1, rate * secs, 1000),
        );
        await sleep(500);
      }
    }
    for (const p of paths.filter((x) => x !== "go" && rates.go)) {
      log(`${p}/go per round: ${rates[p]!.map((o, i) => (o / rates.go![i]!).toFixed(3)).join(" ")}`);
    }
    if (perf) {
      // CPU us per dial (each round's CPU time split by its perf samples), mean over rounds.
      const columns = Object.entries(byCategory).flatMap(([path, byProc]) =>
        Object.entries(byProc).map(([proc, cats]) => ({ label: `${path} ${proc}`, cats })),
      );
      const value = (cats: Record<string, number>, row: string): number =>
        (row === "total" ? Object.values(cats).reduce((a, b) => a + b, 0) : (cats[row] ?? 0)) / rounds;
      log(`\nCPU us per dial by category (Linux perf samples, mean of ${rounds} rounds)`);
      log(`| category | ${columns.map((c) => c.label).join(" | ")} |`);
      log(`| --- | ${columns.map(() => "---").join(" | ")} |`);
      for (const row of [...PERF_CATEGORIES.map((c) => c.name), "total"]) {
        log(`| ${row} | ${columns.map((c) => value(c.cats, row).toFixed(0)).join(" | ")} |`);
      }
    }
  } else if (scenario === "bulk") {
    const perf = flag("perf");
    const gcCounters = Object.fromEntries(
      Object.entries(stacks).map(([path, st]) => [
        path,
        { server: markCompacts(st.server), agent: markCompacts(st.agent) },
      ]),
    );
    if (perf && !perfAvailable()) throw new Error("--perf needs Linux perf allowed to sample other processes");
    // path -> direction/process -> category -> CPU s/GB summed over rounds
    const byCategory: Record<string, Record<string, Record<string, number>>> = {};
    for (let r = 0; r < rounds; r++) {
      for (const path of order(r)) {
        const st = stacks[path]!;
        const line: string[] = [];
        for (const dir of ["download", "upload"] as const) {
          const pids = { server: st.server.child.pid, agent: st.agent?.child.pid, target: tpid };
          const who = { server: pids.server!, agent: pids.agent! };
          const recordings = perf
            ? Object.entries(who).map(([name, pid]) => {
                const file = join(h.dir, `perf-${path}-${dir}-${name}-${r}.data`);
                return { name: name as keyof typeof who, file, proc: startPerf(pid, file) };
              })
            : [];
          if (perf) await sleep(300); // perf attaches before the transfer starts
          const gc = gcCounters[path]!;
          const gc0 = { server: gc.server(), agent: gc.agent() };
          const res = await bulk(open(path), target.bulk, dir, num("mib", 512) * MiB, pids);
          const gb = res.bytes / 1e9;
          const gcs =
            flag("gc") && path !== "go"
              ? `, mark-compacts/GB server ${((gc.server() - gc0.server) / gb).toFixed(1)} agent ${((gc.agent() - gc0.agent) / gb).toFixed(1)}`
              : "";
          for (const rec of recordings) {
            await stopPerf(rec.proc);
            const sums = ((byCategory[path] ??= {})[`${dir} ${rec.name}`] ??= {});
            for (const [cat, share] of perfCategories(rec.file))
              sums[cat] = (sums[cat] ?? 0) + share * res.cpuPerGB[rec.name];
          }
          line.push(
            `${dir} ${res.mbps.toFixed(0)} Mbit/s (CPU s/GB server ${res.cpuPerGB.server.toFixed(2)} ` +
              `agent ${res.cpuPerGB.agent.toFixed(2)}${gcs})`,
          );
        }
        log(`round ${r + 1} ${path}: ${line.join(", ")}`);
      }
    }
    if (perf) reportPerf(byCategory);
  } else if (scenario === "many") {
    const conns = num("conns", 64);
    const ms = num("secs", 3) * 1000;
    for (let r = 0; r < rounds; r++) {
      for (const path of order(r)) {
        const st = stacks[path]!;
        const c0 = cpuOf(st, tpid);
        const { bytes: got } = await manyBytes(open(path), target.bulk, conns, ms);
        const c1 = cpuOf(st, tpid);
        const total = got.reduce((a, b) => a + b, 0);
        const sorted = got.slice().sort((a, b) => a - b);
        const mb = (x: number): string => ((x * 8) / (ms / 1000) / 1e6).toFixed(0);
        log(
          `round ${r + 1} ${path}: ${mb(total)} Mbit/s total, fairness ${(sorted[0]! / (total / conns)).toFixed(3)}, ` +
            `per conn min/p10/median/max ${mb(sorted[0]!)}/${mb(sorted[Math.floor(conns / 10)]!)}/` +
            `${mb(sorted[Math.floor(conns / 2)]!)}/${mb(sorted[conns - 1]!)} Mbit/s; ` +
            `CPU s/GB: ${perOp(c0, c1, total / 1e9, 1)}`,
        );
        if (flag("per-conn")) log(`  per conn in dial order: ${got.map(mb).join(" ")}`);
      }
    }
  } else if (scenario === "firstbyte") {
    // New connection to first echoed byte: a single-use tunnel (new TLS session) and the reusable client.
    const count = num("count", 200);
    const firstBytes: Record<string, number[]> = {};
    for (let r = 0; r < rounds; r++) {
      for (const path of order(r)) {
        const st = stacks[path]!;
        const line: string[] = [];
        const address = `${st.dialHost}:${target.echo}`;
        const kinds: [string, () => Promise<number[]>][] = [
          ["single-use", () => firstByte(singleUseOpener(st), target.echo, count, 60_000)],
          ["reusable", () => firstByte(open(path), target.echo, count, 60_000)],
          // The Go konnectivity-client's own process (full handshakes) against every server, and a
          // plain node client (bench/client-floor.ts, resuming as our SDK does) against ours and the floor.
          ["go-client", () => goClientFirstBytes(h, st, target.echo, count)],
        ];
        if (path !== "go") kinds.push(["client-floor", () => clientFloorFirstBytes(st.proxy, address, count, 60_000)]);
        for (const [kind, measure] of kinds) {
          const c0 = cpuOf(st, tpid);
          const ms = await measure();
          const c1 = cpuOf(st, tpid);
          const p50 = percentileOf(ms, 50);
          (firstBytes[`${path} ${kind}`] ??= []).push(p50);
          line.push(`${kind} p50 ${p50.toFixed(3)} ms (CPU ms/conn: ${perOp(c0, c1, ms.length, 1000)})`);
        }
        log(`round ${r + 1} ${path}: ${line.join("; ")}`);
      }
    }
    for (const p of paths.filter((x) => x !== "go" && firstBytes["go reusable"])) {
      // Each against the Go client through Go's server, as issue 41's targets are.
      for (const kind of ["single-use", "client-floor", "go-client"]) {
        const mine = firstBytes[`${p} ${kind}`];
        const go = firstBytes["go go-client"]!;
        if (mine) log(`${p} ${kind}/go-client per round: ${mine.map((o, i) => (o / go[i]!).toFixed(3)).join(" ")}`);
      }
      for (const kind of ["single-use", "reusable"]) {
        const mine = firstBytes[`${p} ${kind}`]!;
        const go = firstBytes[`go ${kind}`]!;
        log(`${p}/go ${kind} per round: ${mine.map((o, i) => (o / go[i]!).toFixed(3)).join(" ")}`);
      }
    }
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }

  for (const path of paths) {
    const st = stacks[path]!;
    if (path !== "go" && path !== "ours2" && profDir) await stopAndSummarise(st, join(profDir, path));
    else await st.stop();
  }
  await target.proc.kill();
}

try {
  await main();
} finally {
  await h.close();
}
