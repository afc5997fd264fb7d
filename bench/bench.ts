/**
 * `npm run bench [-- --quick] [--no-build] [--no-profile] [--only=a,b]`: cluster-proxy against
 * direct TCP and against the Go konnectivity tunnel, in one run, mTLS on both tunnel legs.
 *
 * Scenarios (names for --only): loopback (bulk, one connection, each direction), shaped (the same
 * across a veth pair shaped with tc, hub and cluster in separate network namespaces), many (8 and
 * 64 concurrent downloads), latency (64-byte round trips, time to first byte), dialrate (the paths
 * take turns window by window), agents (idle agents on one server: RSS once they are in, per agent
 * of the second half alone, and after two minutes idle), agents10k (10,000 load agents on one
 * server next to a real agent: connect time, server RSS and CPU per agent, first-byte latency before,
 * while they connect (failed client dials counted) and once they are connected), conns (idle connections through one agent), profile (our server under --cpu-prof during bulk transfers; full runs only unless
 * --profile). `--report-only` re-renders the table, latest.json and the chart from
 * results/latest-detail.json. bench/hotpath.ts runs one scenario at a time, with profiles.
 *
 * Writes bench/results/latest.json (stable keys, read by other tools), latest-detail.json (every
 * sample), chart.svg, and prints a table of medians [min-max] with ours/direct and ours/Go.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { writeStandaloneCerts } from "@cluster-proxy/pki";
import { Harness } from "../test/framework/harness.js";
import { waitFor } from "../test/framework/waits.js";
import { goBin } from "../test/framework/go-harness.js";
import {
  BENCH,
  CLUSTER,
  FIRST_BYTE,
  FLOOR_VARIANTS,
  LOOPBACK,
  MiB,
  PATHS,
  REPO,
  TS_NODE,
  agentFleet,
  bulk,
  connectOpener,
  dialRate,
  firstByte,
  goClientFirstBytes,
  idleConns,
  many,
  opener,
  percentileOf,
  rssBytes,
  singleUseOpener,
  sleep,
  startGo,
  startRelayFloor,
  startOurs,
  startTarget,
  rtt,
  type AgentFleet,
  type AgentScaleResult,
  type BulkResult,
  type DialRateResult,
  type IdleConnResult,
  type ManyResult,
  type PathName,
  type RttResult,
  type Stack,
} from "./lib.js";
import { clientFloorFirstBytes } from "./client-floor.js";
import { summarizeProfile } from "./profile.js";
import { report, type Detail } from "./report.js";
import { currentRuntime, machineInfo } from "./run-info.js";
import type { ShapedConfig, ShapedResult } from "./shaped.js";
import { errorMessage } from "@cluster-proxy/errors";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const onlyArg = argv.find((a) => a.startsWith("--only="))?.slice("--only=".length);
const only = onlyArg ? new Set(onlyArg.split(",")) : undefined;
const wantProfile = argv.includes("--profile") || (!quick && !argv.includes("--no-profile"));
const enabled = (s: string): boolean => (only ? only.has(s) : s !== "profile" || wantProfile);

const P = quick
  ? {
      runs: 3,
      bulkBytes: 128 * MiB,
      shapedBytes: 64 * MiB,
      manyMs: 1000,
      rttCount: 1000,
      rttMaxMs: 4000,
      fbCount: 20,
      dialWindows: 5,
      dialWindowMs: 1000,
      agents: 200,
      agentProcs: 2,
      idleMs: 3000,
      settleMs: 0,
      idleConns: 1000,
      profileBytes: 64 * MiB,
      bigAgents: 2000,
      bigAgentProcs: 4,
      bigFbCount: 30,
    }
  : {
      runs: 5,
      bulkBytes: 1024 * MiB,
      shapedBytes: 256 * MiB,
      manyMs: 3000,
      rttCount: 5000,
      rttMaxMs: 10_000,
      fbCount: 100,
      dialWindows: 6,
      dialWindowMs: 5000,
      agents: 1000,
      agentProcs: 4,
      idleMs: 10_000,
      settleMs: 120_000,
      idleConns: 10_000,
      profileBytes: 512 * MiB,
      bigAgents: 10_000,
      bigAgentProcs: 10,
      bigFbCount: 100,
    };
const DIAL_CONCURRENCY = 16;
const MANY = [8, 64];

const log = (s: string): void => void process.stderr.write(`bench: ${s}\n`);
const t0 = Date.now();
const elapsed = (): string => `${((Date.now() - t0) / 1000).toFixed(0)}s`;

process.chdir(BENCH);
const limit = Number(/Max open files\s+(\d+)/.exec(readFileSync("/proc/self/limits", "utf8"))?.[1] ?? 0);
if (limit < P.idleConns + 2000) {
  log(`open-file limit ${limit} is low for ${P.idleConns} idle connections; run through \`npm run bench\` (raises it)`);
}

// ---------------------------------------------------------------------------------------------
// Clean-up of everything we start: processes by PID (harness), the shaped child, namespaces.

const h = new Harness();
let shapedChild: ChildProcess | undefined;
const namespaces: string[] = [];

function nsPids(ns: string): number[] {
  try {
    return execFileSync("ip", ["netns", "pids", ns], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function deleteNamespace(ns: string): void {
  for (let i = 0; i < 10; i++) {
    const pids = nsPids(ns);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* gone */
      }
    }
    execFileSync("sleep", ["0.2"]);
  }
  try {
    execFileSync("ip", ["netns", "del", ns], { stdio: "ignore" });
  } catch {
    /* already gone */
  }
}

let cleaned = false;
async function cleanup(): Promise<void> {
  if (cleaned) return;
  cleaned = true;
  if (shapedChild?.pid && shapedChild.exitCode === null) shapedChild.kill("SIGKILL");
  await h.close().catch(() => undefined);
  for (const ns of namespaces.splice(0)) deleteNamespace(ns);
}
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(sig, () => {
    log(`${sig}: stopping everything we started`);
    void cleanup().then(() => process.exit(130));
  });
}

// A TunnelSocket can fail (stream reset) in the tick its dial resolves, before the caller can
// attach an 'error' listener: count those instead of dying with processes left running.
let strayTunnelErrors = 0;
let lastStray = "";
process.on("uncaughtException", (err: Error & { code?: string }) => {
  if (err.code === "CP_ERR_TUNNEL_CLOSED") {
    strayTunnelErrors++;
    lastStray = err.message;
    return;
  }
  log(`uncaught: ${err.stack ?? String(err)}`);
  void cleanup().then(() => process.exit(1));
});
process.on("unhandledRejection", (err) => {
  log(`unhandled rejection: ${(err as Error).stack ?? String(err)}`);
  void cleanup().then(() => process.exit(1));
});

/** Namespaces left behind by a runner that died (its PID is gone). */
function removeStaleNamespaces(): void {
  let list = "";
  try {
    list = execFileSync("ip", ["netns", "list"], { encoding: "utf8" });
  } catch {
    return;
  }
  for (const line of list.split("\n")) {
    const m = /^(cpbench-(?:hub|mc)-(\d+))\b/.exec(line);
    if (!m) continue;
    if (existsSync(`/proc/${m[2]}`)) continue;
    log(`removing stale namespace ${m[1]}`);
    deleteNamespace(m[1]!);
  }
}

// ---------------------------------------------------------------------------------------------

function build(): string {
  if (!argv.includes("--no-build")) {
    log("building the workspace (npm run build)");
    execFileSync("npm", ["run", "build"], { cwd: REPO, stdio: ["ignore", process.stderr, "inherit"] });
  }
  return goBin();
}

function machine(bin: string): Record<string, unknown> {
  let go = "";
  try {
    go = execFileSync(join(bin, "proxy-server"), ["--version"], { encoding: "utf8", stdio: "pipe" }).trim();
  } catch {
    /* not every build prints a version */
  }
  try {
    go ||= execFileSync("go", ["version"], { encoding: "utf8" }).trim();
  } catch {
    /* no go on PATH */
  }
  let versions: Record<string, string> = {};
  try {
    versions = JSON.parse(readFileSync(join(REPO, "test/infra/go-peers/versions.json"), "utf8")) as Record<
      string,
      string
    >;
  } catch {
    /* optional */
  }
  return machineInfo({ go, apiserver_network_proxy: versions["apiserver-network-proxy"] ?? "" });
}

async function runShaped(bin: string, detail: Detail): Promise<void> {
  if (process.getuid?.() !== 0) {
    log("shaped: skipped (needs root for network namespaces and tc)");
    detail.notes.push("shaped scenario skipped: not root");
    return;
  }
  removeStaleNamespaces();
  const hubNs = `cpbench-hub-${process.pid}`;
  const mcNs = `cpbench-mc-${process.pid}`;
  const vh = `cpbh${process.pid}`;
  const vm = `cpbm${process.pid}`;
  const hubIp = "10.201.0.1";
  const mcIp = "10.201.0.2";
  const delay = "2ms";
  const ip = (...a: string[]): void => void execFileSync("ip", a, { stdio: ["ignore", "ignore", "inherit"] });
  namespaces.push(hubNs, mcNs);
  ip("netns", "add", hubNs);
  ip("netns", "add", mcNs);
  ip("link", "add", vh, "type", "veth", "peer", "name", vm);
  ip("link", "set", vh, "netns", hubNs);
  ip("link", "set", vm, "netns", mcNs);
  const tc = (ns: string, dev: string, qdisc: string[]): boolean => {
    try {
      execFileSync("ip", ["netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", ...qdisc], {
        stdio: "ignore",
      });
      return true;
    } catch {
      return false;
    }
  };
  // Preferred: netem, 1 Gbit/s and 2 ms each way (4 ms RTT); the queue holds well over a BDP.
  // Kernels without sch_netem (some VMs/containers) get tbf at 1 Gbit/s and no added delay.
  const netem = ["netem", "delay", delay, "rate", "1gbit", "limit", "10000"];
  const tbf = ["tbf", "rate", "1gbit", "burst", "256kb", "latency", "10ms"];
  let shaping = "";
  for (const [ns, dev, addr] of [
    [hubNs, vh, `${hubIp}/30`],
    [mcNs, vm, `${mcIp}/30`],
  ] as const) {
    ip("-n", ns, "addr", "add", addr, "dev", dev);
    ip("-n", ns, "link", "set", "lo", "up");
    ip("-n", ns, "link", "set", dev, "up");
    if (shaping !== "tbf" && tc(ns, dev, netem)) shaping = "netem";
    else if (tc(ns, dev, tbf)) shaping = "tbf";
    else throw new Error("tc: neither netem nor tbf can be set up on the veth pair");
  }
  if (shaping === "tbf") {
    // The hub end may have got netem before the cluster end fell back: make both ends alike.
    tc(hubNs, vh, tbf);
    tc(mcNs, vm, tbf);
  }
  detail.shapedLink =
    shaping === "netem"
      ? `veth between namespaces ${hubNs} and ${mcNs}, netem rate 1gbit delay ${delay} each way (RTT ~4 ms)`
      : `veth between namespaces ${hubNs} and ${mcNs}, tbf rate 1gbit each way, NO added delay ` +
        "(this kernel has no sch_netem, so tc cannot add delay)";
  if (shaping === "tbf") detail.notes.push(`shaped link: ${detail.shapedLink}`);
  const cfg: ShapedConfig = {
    certs: { ...h.certs, agents: [...h.certs.agents.entries()] },
    mcNs,
    hubIp,
    mcIp,
    goBin: bin,
    bytes: P.shapedBytes,
    runs: P.runs,
  };
  log(`shaped: ${detail.shapedLink}`);
  const child = spawn(
    "ip",
    ["netns", "exec", hubNs, process.execPath, ...TS_NODE, join(BENCH, "shaped.ts"), JSON.stringify(cfg)],
    {
      cwd: BENCH,
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  shapedChild = child;
  let out = "";
  child.stdout?.on("data", (c: Buffer) => (out += c.toString()));
  const limitMs = 15 * 60_000;
  const timer = setTimeout(() => child.kill("SIGTERM"), limitMs);
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  clearTimeout(timer);
  shapedChild = undefined;
  for (const ns of [hubNs, mcNs]) {
    deleteNamespace(ns);
    namespaces.splice(namespaces.indexOf(ns), 1);
  }
  const line = out.split("\n").find((l) => l.startsWith("RESULT "));
  if (code !== 0 || !line) throw new Error(`shaped scenario exited with ${code}`);
  detail.shaped = JSON.parse(line.slice("RESULT ".length)) as ShapedResult;
}

async function main(): Promise<void> {
  const bin = build();
  log(`Go peers: ${bin}`);
  h.dir = join(os.tmpdir(), `cpbench-${process.pid}`);
  h.certs = await writeStandaloneCerts(join(h.dir, "pki"), {
    // "load": the certificate of the load agents of agents10k, so they do not serve "bench" dials.
    clusters: ["bench", "load"],
    hubHosts: ["localhost", "127.0.0.1", "10.201.0.1"],
  });
  const detail: Detail = {
    quick,
    params: { ...P, dialConcurrency: DIAL_CONCURRENCY, many: MANY },
    machine: machine(bin),
    runtime: currentRuntime(log),
    notes: [],
    loopback: null,
    shaped: null,
    shapedLink: "",
    many: {},
    rtt: null,
    firstByte: {},
    dialRate: null,
    agents: {},
    idleConns: {},
    idleAgentRssMiB: {},
    agents10k: {},
    profile: "",
  };
  if (quick) {
    detail.notes.push(
      `--quick: ${P.runs} runs, ${P.bulkBytes / MiB} MiB transfers, ${P.agents} agents (not 1,000), ` +
        `${P.idleConns} idle connections (not 10,000), dial rate over ${(P.dialWindows * P.dialWindowMs) / 1000} s (not 30 s)`,
    );
  }

  const needLoopback = ["loopback", "many", "latency", "dialrate", "conns"].some(enabled);
  if (needLoopback) {
    const target = await startTarget(h, LOOPBACK);
    const stacks: Partial<Record<PathName, Stack>> = {
      ours: await startOurs(h, LOOPBACK),
      go: await startGo(h, LOOPBACK, bin),
    };
    // Two floors next to them: a bare node process (the runtime alone) and a plain node process
    // holding one mutual-TLS HTTP/2 session to our agent port (any Node.js tunnel agent's floor).
    const bare = h.spawnProc("bare-node", process.execPath, ["-e", "setInterval(() => undefined, 60_000)"]);
    const agentCert = h.certs.agents.get(CLUSTER)!;
    const tunnelFloor = h.spawnProc("node-tunnel-floor", process.execPath, [
      join(BENCH, "node-tunnel-floor.mjs"),
      LOOPBACK.agentServerHost,
      String(stacks.ours!.agentPort),
      h.certs.ca.cert,
      agentCert.cert,
      agentCert.key,
    ]);
    await waitFor(`node-tunnel-floor connected\n${tunnelFloor.output()}`, () =>
      tunnelFloor.output().includes("connected"),
    );
    await sleep(3000);
    detail.idleAgentRssMiB = {
      ours: rssBytes(stacks.ours?.agent?.child.pid) / MiB,
      go: rssBytes(stacks.go?.agent?.child.pid) / MiB,
      bareNode: rssBytes(bare.child.pid) / MiB,
      nodeTunnelFloor: rssBytes(tunnelFloor.child.pid) / MiB,
    };
    await bare.kill("SIGKILL");
    await tunnelFloor.kill("SIGKILL");
    // Our design in plain Node.js and nothing else (bench/relay-floor.ts): what any Node.js
    // implementation costs per new connection (first byte, dial rate).
    const floor = await startRelayFloor(h);
    const pidsOf = (path: PathName): { server?: number; agent?: number; target?: number } => ({
      server: stacks[path]?.server.child.pid,
      agent: stacks[path]?.agent?.child.pid,
      target: target.proc.child.pid,
    });

    if (enabled("loopback")) {
      log(`loopback bulk: ${P.runs} runs x ${P.bulkBytes / MiB} MiB each direction [${elapsed()}]`);
      const res: Record<"download" | "upload", Record<PathName, BulkResult[]>> = {
        download: { direct: [], ours: [], go: [] },
        upload: { direct: [], ours: [], go: [] },
      };
      for (let run = 0; run < P.runs; run++) {
        for (const path of PATHS) {
          for (const dir of ["download", "upload"] as const) {
            const r = await bulk(opener(path, LOOPBACK, stacks[path]), target.bulk, dir, P.bulkBytes, pidsOf(path));
            res[dir][path].push(r);
          }
        }
        log(
          `  run ${run + 1}: ` +
            PATHS.map(
              (p) => `${p} ${res.download[p].at(-1)!.mbps.toFixed(0)}/${res.upload[p].at(-1)!.mbps.toFixed(0)}`,
            ).join(", ") +
            " Mbit/s (down/up)",
        );
      }
      detail.loopback = res;
    }

    if (enabled("many")) {
      log(
        `many connections: ${MANY.join(" and ")} concurrent downloads, ${P.runs} runs x ${P.manyMs} ms [${elapsed()}]`,
      );
      for (const n of MANY) {
        const res: Record<PathName, ManyResult[]> = { direct: [], ours: [], go: [] };
        for (let run = 0; run < P.runs; run++) {
          for (const path of PATHS)
            res[path].push(await many(opener(path, LOOPBACK, stacks[path]), target.bulk, n, P.manyMs));
        }
        detail.many[String(n)] = res;
      }
    }

    if (enabled("latency")) {
      log(`latency: ${P.runs} runs x ${P.rttCount} round trips; first byte x ${P.fbCount} per variant [${elapsed()}]`);
      const res: Record<PathName, RttResult[]> = { direct: [], ours: [], go: [] };
      for (let run = 0; run < P.runs; run++) {
        for (const path of PATHS)
          res[path].push(await rtt(opener(path, LOOPBACK, stacks[path]), target.echo, P.rttCount, P.rttMaxMs));
      }
      detail.rtt = res;
      const ours = stacks.ours!;
      const go = stacks.go!;
      type Measure = (count: number, maxMs: number) => Promise<number[]>;
      const echoVia = (st: Stack): string => `${st.dialHost}:${target.echo}`;
      const through =
        (open: ReturnType<typeof opener>): Measure =>
        (count, maxMs) =>
          firstByte(open, target.echo, count, maxMs);
      const variants: [string, Measure][] = [
        ["direct TCP", through(opener("direct", LOOPBACK, undefined))],
        // Our SDK's dial: a new HTTP/2 session per connection, resuming the TLS session of the last.
        [FIRST_BYTE.oursSingleUse, through(singleUseOpener(ours))],
        ["go single-use gRPC tunnel", through(singleUseOpener(go))],
        // The real Go konnectivity-client (full handshakes, as in the OCM README) against each server.
        [FIRST_BYTE.goClientOurs, (count) => goClientFirstBytes(h, ours, target.echo, count)],
        [FIRST_BYTE.goClientGo, (count) => goClientFirstBytes(h, go, target.echo, count)],
        [FIRST_BYTE.goClientFloor, (count) => goClientFirstBytes(h, floor, target.echo, count)],
        ["ours reusable client", through(opener("ours", LOOPBACK, ours))],
        ["go reusable client (our SDK)", through(opener("go", LOOPBACK, go))],
        ["ours HTTP CONNECT (mTLS)", through(connectOpener(ours))],
        [FLOOR_VARIANTS.singleUse, through(singleUseOpener(floor))],
        // What a Node.js client cannot avoid on a new connection: a plain one, resuming as our SDK does.
        [FIRST_BYTE.clientFloorOurs, (count, maxMs) => clientFloorFirstBytes(ours.proxy, echoVia(ours), count, maxMs)],
        [
          FIRST_BYTE.clientFloorFloor,
          (count, maxMs) => clientFloorFirstBytes(floor.proxy, echoVia(floor), count, maxMs),
        ],
        [FLOOR_VARIANTS.reusable, through(opener("ours", LOOPBACK, floor))],
      ];
      // The variants take turns, P.runs rounds of a share of the connections each, so a change in the
      // machine's load over the scenario does not favour the variant that happened to run first.
      for (const [name] of variants) detail.firstByte[name] = [];
      const share = Math.ceil(P.fbCount / P.runs);
      for (let run = 0; run < P.runs; run++) {
        for (const [name, measure] of variants)
          detail.firstByte[name]!.push(...(await measure(share, 60_000 / P.runs)));
      }
    }

    if (enabled("dialrate")) {
      const secs = (P.dialWindows * P.dialWindowMs) / 1000;
      log(`dial rate: ${secs} s per path, ${DIAL_CONCURRENCY} concurrent dialers [${elapsed()}]`);
      const res: Record<PathName, DialRateResult> = {
        direct: { windows: [], errors: 0, lastError: "" },
        ours: { windows: [], errors: 0, lastError: "" },
        go: { windows: [], errors: 0, lastError: "" },
      };
      const floorRate: DialRateResult = { windows: [], errors: 0, lastError: "" };
      // The paths (and the node floor) take turns window by window, so a change in the machine's load over the
      // scenario does not favour the path that happened to run first.
      for (let w = 0; w < P.dialWindows; w++) {
        for (const path of PATHS) {
          const r = await dialRate(
            opener(path, LOOPBACK, stacks[path]),
            target.echo,
            1,
            P.dialWindowMs,
            DIAL_CONCURRENCY,
          );
          res[path].windows.push(...r.windows);
          res[path].errors += r.errors;
          res[path].lastError = r.lastError || res[path].lastError;
          await sleep(500);
        }
        const f = await dialRate(opener("ours", LOOPBACK, floor), target.echo, 1, P.dialWindowMs, DIAL_CONCURRENCY);
        floorRate.windows.push(...f.windows);
        floorRate.errors += f.errors;
        floorRate.lastError = f.lastError || floorRate.lastError;
        await sleep(500);
      }
      detail.dialRateFloor = floorRate;
      for (const path of PATHS) {
        const lastErr = res[path].lastError ? `, last: ${res[path].lastError}` : "";
        log(
          `  ${path}: ${res[path].windows.map((w) => w.toFixed(0)).join(", ")} dials/s (errors ${res[path].errors}${lastErr})`,
        );
      }
      detail.dialRate = res;
    }

    if (enabled("conns")) {
      log(`idle connections: ${P.idleConns} through one agent [${elapsed()}]`);
      for (const path of ["ours", "go"] as const) {
        const r: IdleConnResult = await idleConns(stacks[path]!, target.echo, P.idleConns, 64);
        detail.idleConns[path] = [r];
        log(
          `  ${path}: server ${(r.serverBytesPerConn / 1024).toFixed(1)} KiB, agent ${(r.agentBytesPerConn / 1024).toFixed(1)} KiB per connection`,
        );
      }
    }
    await floor.stop();
    for (const st of Object.values(stacks)) await st.stop();
    await target.proc.kill();
  }

  if (enabled("agents")) {
    log(`agents: ${P.agents} idle agents on one server, in ${P.agentProcs} processes [${elapsed()}]`);
    // Both servers run side by side; their agents connect one path after the other, and stay
    // (idle) until both have been idle for P.settleMs, when the servers' RSS is read once more.
    const stacks: Stack[] = [];
    const fleets: AgentFleet[] = [];
    try {
      for (const path of ["ours", "go"] as const) {
        const st =
          path === "ours"
            ? await startOurs(h, LOOPBACK, { noAgent: true })
            : await startGo(h, LOOPBACK, bin, { noAgent: true });
        stacks.push(st);
        const fleet = await agentFleet(h, st, P.agents, P.agentProcs, P.idleMs, "host=bench");
        fleets.push(fleet);
        const r: AgentScaleResult = fleet.result;
        detail.agents[path] = [r];
        log(
          `  ${path}: ${r.rssMiB.toFixed(1)} MiB RSS, ${(r.bytesPerAgent / 1024).toFixed(1)} KiB/agent, idle CPU ${r.idleCpuPercent.toFixed(2)}%`,
        );
      }
      if (P.settleMs > 0) {
        for (const [i, fleet] of fleets.entries()) {
          await fleet.settle(P.settleMs);
          const r = fleet.result;
          log(
            `  ${i === 0 ? "ours" : "go"} after ${r.settledAfterS} s idle: ${r.settledRssMiB!.toFixed(1)} MiB RSS, ` +
              `${(r.settledBytesPerAgent! / 1024).toFixed(1)} KiB/agent`,
          );
        }
      }
    } finally {
      for (const fleet of fleets) await fleet.release();
      for (const st of stacks) await st.stop();
    }
  }

  if (enabled("agents10k")) {
    log(`agents10k: ${P.bigAgents} load agents on one server, in ${P.bigAgentProcs} processes [${elapsed()}]`);
    detail.notes.push(
      `agents10k: ${P.bigAgents} agents measured on each server (not extrapolated), played by bench/load-agent.ts ` +
        "(each its own mTLS HTTP/2 connection and Connect stream, as a real agent on the wire, many per process); " +
        `${P.bigAgents} real Go proxy-agent processes (~31 MiB each) do not fit this machine, so both servers get the same load agents`,
    );
    const target = await startTarget(h, LOOPBACK);
    try {
      for (const path of ["ours", "go"] as const) {
        const st = path === "ours" ? await startOurs(h, LOOPBACK) : await startGo(h, LOOPBACK, bin);
        let fleet: AgentFleet | undefined;
        try {
          const open = opener(path, LOOPBACK, st);
          const before = await firstByte(open, target.echo, P.bigFbCount, 60_000);
          /**
           * While `storm` runs, a client dials through the real agent every 200 ms (one at a
           * time, at most 1,000): the first bytes and the dials that failed.
           */
          const probed = async <T>(
            storm: () => Promise<T>,
          ): Promise<{ result: T; ms: number[]; failed: number; lastError: string }> => {
            const seen = { ms: [] as number[], failed: 0, lastError: "" };
            let storming = true;
            const probe = (async () => {
              for (let i = 0; storming && i < 1000; i++) {
                try {
                  seen.ms.push(...(await firstByte(open, target.echo, 1, 30_000)));
                } catch (e) {
                  seen.failed++;
                  seen.lastError = errorMessage(e);
                }
                await sleep(200);
              }
            })();
            try {
              return { result: await storm(), ...seen };
            } finally {
              storming = false;
              await probe;
            }
          };
          const connect = await probed(() =>
            agentFleet(h, st, P.bigAgents, P.bigAgentProcs, 3000, "host=load", "load", { resume: path === "ours" }),
          );
          fleet = connect.result;
          const during = await firstByte(open, target.echo, P.bigFbCount, 60_000);
          // Then all of them at once again, as after a hub restart: ours resume their sessions, Go's
          // agents keep no session cache.
          const again = await probed(() => fleet!.reconnect());
          const r = fleet.result;
          (detail.agents10k ??= {})[path] = {
            ...r,
            firstByteBeforeMs: before,
            firstByteMs: during,
            firstByteStormMs: connect.ms,
            stormDialFailures: connect.failed,
            reconnect: { ...again.result, dialFailures: again.failed, firstByteMs: again.ms },
          };
          const x = again.result;
          log(
            `  ${path}: ${r.agents} agents in ${r.connectSeconds.toFixed(1)} s, ${r.rssMiB.toFixed(0)} MiB RSS ` +
              `(${(r.bytesPerAgent / 1024).toFixed(1)} KiB/agent), first byte p50 ` +
              `${percentileOf(during, 50).toFixed(2)} ms (before: ${percentileOf(before, 50).toFixed(2)} ms; ` +
              `while they connected: ${percentileOf(connect.ms, 50).toFixed(2)} ms, ${connect.ms.length} dials, ` +
              `${connect.failed} failed${connect.lastError ? `: ${connect.lastError}` : ""}); all reconnecting at once: ` +
              `${x.seconds.toFixed(1)} s, ${x.resumed} resumed, ${again.ms.length} dials meanwhile, ${again.failed} failed` +
              (again.lastError ? `: ${again.lastError}` : ""),
          );
        } finally {
          await fleet?.release();
          await st.stop();
        }
      }
    } catch (e) {
      log(`agents10k: FAILED: ${errorMessage(e)}`);
      detail.notes.push(`agents10k scenario failed: ${errorMessage(e).split("\n")[0]}`);
    } finally {
      await target.proc.kill();
    }
  }

  if (enabled("shaped")) {
    log(`shaped link: ${P.runs} runs x ${P.shapedBytes / MiB} MiB each direction [${elapsed()}]`);
    try {
      await runShaped(bin, detail);
    } catch (e) {
      log(`shaped: FAILED: ${errorMessage(e)}`);
      detail.notes.push(`shaped scenario failed: ${errorMessage(e)}`);
    }
  }

  if (enabled("profile")) {
    log(`profile: our server under --cpu-prof, ${P.profileBytes / MiB} MiB each direction [${elapsed()}]`);
    const dir = join(h.dir, "prof");
    mkdirSync(dir, { recursive: true });
    const target = await startTarget(h, LOOPBACK);
    const st = await startOurs(h, LOOPBACK, { cpuProfDir: dir });
    const pids = { server: st.server.child.pid, agent: st.agent?.child.pid, target: target.proc.child.pid };
    for (const dir2 of ["download", "upload"] as const) {
      await bulk(opener("ours", LOOPBACK, st), target.bulk, dir2, P.profileBytes, pids);
    }
    await st.stop(true);
    await target.proc.kill();
    const file = readdirSync(dir).find((f) => f.endsWith(".cpuprofile"));
    if (file) {
      detail.profile = summarizeProfile(readFileSync(join(dir, file), "utf8"), 20);
      writeFileSync(join(BENCH, "results/profile-server.txt"), detail.profile);
    } else {
      detail.notes.push("profile: the server wrote no .cpuprofile");
    }
  }

  if (strayTunnelErrors > 0) {
    detail.notes.push(
      `${strayTunnelErrors} tunnelled connection(s) of ours failed with no listener attached yet (${lastStray})`,
    );
  }
  detail.machine["total_seconds"] = Math.round((Date.now() - t0) / 1000);
  report(detail, join(BENCH, "results"));
  log(`done in ${elapsed()}`);
}

if (argv.includes("--report-only")) {
  // Re-render table, latest.json and chart from the last run's samples (JSON wrote each NaN, a
  // figure a path does not have, as null: read back as NaN, as the run had it).
  const d = JSON.parse(readFileSync(join(BENCH, "results/latest-detail.json"), "utf8"), (_k, v: unknown) =>
    v === null ? NaN : v,
  ) as Detail;
  report(d, join(BENCH, "results"));
  process.exit(0);
}

try {
  await main();
  await cleanup();
  process.exit(0);
} catch (e) {
  log(`FAILED: ${(e as Error).stack ?? String(e)}`);
  await cleanup();
  process.exit(1);
}
