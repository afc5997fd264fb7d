/**
 * Building blocks of the benchmark: starting the three paths (direct, ours, Go) on a given
 * topology (loopback, or two network namespaces), and the measurements themselves. Processes
 * go through the integration harness's `spawnProc`, so they are recorded and killed by PID.
 */
import { once } from "node:events";
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { join, resolve } from "node:path";
import type { Duplex } from "node:stream";
import { NODE_FLAGS, nodeFlagsFor } from "@cluster-proxy/cli";
import { TunnelClient, dial, dialConnect, type ProxyOptions } from "@cluster-proxy/client";
import type { StandaloneCertPaths } from "@cluster-proxy/pki";
import { CLI } from "../test/framework/repo.js";
import { agentCertFlags, freePort, serverCertFlags, type Harness } from "../test/framework/harness.js";
import { GoClientDriver } from "../test/framework/go-harness.js";
import { httpGet } from "../test/framework/http.js";
import { waitFor } from "../test/framework/waits.js";
import { type Proc } from "../test/framework/process.js";
import { errorMessage } from "@cluster-proxy/errors";

export const BENCH = import.meta.dirname;
export const REPO = resolve(BENCH, "..");
/** Node flags that run a bench/*.ts file (tsx, sources of the workspace packages). */
export const TS_NODE = ["--conditions=source", "--import", "tsx"];
export const MiB = 1024 * 1024;

export type PathName = "direct" | "ours" | "go";
export const PATHS: readonly PathName[] = ["direct", "ours", "go"];

/** Where the pieces run. Loopback: everything on 127.0.0.1 in the current namespace. */
export interface Topology {
  /** Command prefix for processes on the cluster side (agent, target): [] or ip netns exec. */
  clusterWrap: string[];
  /** Address the agents dial to reach the server's agent port. */
  agentServerHost: string;
  /** Address the server's agent port binds to. */
  agentBind: string;
  /** Address the target listens on (the agent dials it as 127.0.0.1). */
  targetBind: string;
  /** Address the client uses for the direct path. */
  directHost: string;
}

export const LOOPBACK: Topology = {
  clusterWrap: [],
  agentServerHost: "127.0.0.1",
  agentBind: "127.0.0.1",
  targetBind: "127.0.0.1",
  directHost: "127.0.0.1",
};

export function spawnWrapped(h: Harness, name: string, wrap: string[], cmd: string, args: string[]): Proc {
  const [first, ...rest] = wrap;
  return first ? h.spawnProc(name, first, [...rest, cmd, ...args]) : h.spawnProc(name, cmd, args);
}

// ---------------------------------------------------------------------------------------------
// /proc readings

const CLK_TCK = 100;

/** CPU seconds (user + system) a process has used so far; 0 when it is gone. */
export function cpuSeconds(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/** Resident set size in bytes; 0 when the process is gone. */
export function rssBytes(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

export function selfCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics

export interface Summary {
  median: number;
  min: number;
  max: number;
  n: number;
}

export function summarize(values: readonly number[]): Summary | null {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = Math.floor(v.length / 2);
  const median = v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
  return { median, min: v[0]!, max: v[v.length - 1]!, n: v.length };
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** {@link percentile} of samples in any order. */
export function percentileOf(values: readonly number[], p: number): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    p,
  );
}

// ---------------------------------------------------------------------------------------------
// The target process

export interface Target {
  proc: Proc;
  echo: number;
  bulk: number;
}

export async function startTarget(h: Harness, topo: Topology): Promise<Target> {
  const proc = spawnWrapped(h, "target", topo.clusterWrap, process.execPath, [
    ...TS_NODE,
    join(BENCH, "target.ts"),
    topo.targetBind,
  ]);
  const ports = await firstJsonLine<{ echo: number; bulk: number }>(proc, "target ports");
  return { proc, echo: ports.echo, bulk: ports.bulk };
}

/** The first line of `proc`'s output that is a JSON object (a helper process's ports), once written. */
export async function firstJsonLine<T>(proc: Proc, what: string): Promise<T> {
  let value: T | undefined;
  await waitFor(`${what}\n${proc.output()}`, () => {
    const line = proc
      .output()
      .split("\n")
      .find((l) => l.startsWith("{"));
    if (line) value = JSON.parse(line) as T;
    return value !== undefined;
  });
  return value!;
}

/** The first-byte variants `report.ts` reads by name besides the node floors. */
export const FIRST_BYTE = {
  oursSingleUse: "ours single-use gRPC tunnel",
  goClientOurs: "Go konnectivity-client single-use against our server",
  goClientGo: "Go konnectivity-client single-use against the Go server",
  goClientFloor: "Go konnectivity-client single-use against the node floor (bench/relay-floor.ts)",
  /** bench/client-floor.ts: a plain node client, resuming, through our server and through the floor. */
  clientFloorOurs: "plain node client single-use against our server (bench/client-floor.ts)",
  clientFloorFloor: "plain node client single-use against the node floor (bench/client-floor.ts)",
} as const;

/** First-byte variant names of the relay floor ({@link startRelayFloor}; keys of the detail's `firstByte`). */
export const FLOOR_VARIANTS = {
  singleUse: "node floor single-use (bench/relay-floor.ts)",
  reusable: "node floor reusable client (bench/relay-floor.ts)",
} as const;

// ---------------------------------------------------------------------------------------------
// Tunnel stacks: our server + agent, the Go server + agent

export interface Stack {
  path: "ours" | "go" | "floor";
  server: Proc;
  agent: Proc | undefined;
  grpcPort: number;
  connectPort: number | undefined;
  agentPort: number;
  healthPort: number;
  /** Host part of dial addresses that reach the target through this stack. */
  dialHost: string;
  proxy: ProxyOptions;
  client: TunnelClient;
  stop(graceful?: boolean): Promise<void>;
}

export interface StackOptions {
  /** Start no agent (scale scenario: load agents connect instead). */
  noAgent?: boolean;
  /** Run our server with --cpu-prof into this directory. */
  cpuProfDir?: string;
  /** Extra node flags for our server / agent process (e.g. --cpu-prof, --heapsnapshot-signal). */
  serverNodeArgs?: string[];
  agentNodeArgs?: string[];
  /** Extra flags for our agent (after the bench's own; bench/gateway.ts: its gateway endpoint). */
  agentArgs?: string[];
  /** Another build of the CLI (A/B comparisons, bench/hotpath.ts). */
  cli?: string;
  /** Another build of the CLI for our agent alone (default: `cli`). */
  agentCli?: string;
  /** Extra flags for our server (after BENCH_OUR_SERVER_ARGS; A/B comparisons of server flags). */
  serverArgs?: string[];
}

function proxyOf(certs: StandaloneCertPaths, port: number): ProxyOptions {
  return {
    host: "127.0.0.1",
    port,
    ca: readFileSync(certs.ca.cert),
    cert: readFileSync(certs.client.cert),
    key: readFileSync(certs.client.key),
  };
}

async function readyz(port: number): Promise<boolean> {
  return (await httpGet(`http://127.0.0.1:${port}/readyz`)).status === 200;
}

function stack(
  path: Stack["path"],
  h: Harness,
  server: Proc,
  agent: Proc | undefined,
  ports: { grpc: number; connect?: number; agent: number; health: number },
  dialHost: string,
): Stack {
  const proxy = proxyOf(h.certs, ports.grpc);
  const client = new TunnelClient({ proxy, dialTimeoutMs: 20_000 });
  return {
    path,
    server,
    agent,
    grpcPort: ports.grpc,
    connectPort: ports.connect,
    agentPort: ports.agent,
    healthPort: ports.health,
    dialHost,
    proxy,
    client,
    stop: async (graceful = false) => {
      await client.close().catch(() => undefined);
      if (agent) await agent.kill("SIGKILL");
      if (graceful) {
        server.child.kill("SIGTERM");
        await withTimeout(server.exited, 15_000, "server exit").catch(() => undefined);
      }
      await server.kill("SIGKILL");
    },
  };
}

export const CLUSTER = "bench";

/**
 * Our agent (the built CLI of `o.cli`) for `cluster` (default {@link CLUSTER}; its certificate
 * must be in `h.certs`) connecting to a server's agent port.
 */
export async function spawnOurAgent(
  h: Harness,
  topo: Topology,
  agentPort: number,
  o: StackOptions,
  cluster: string = CLUSTER,
): Promise<Proc> {
  const suffix = cluster === CLUSTER ? "" : `-${cluster}`;
  return spawnWrapped(h, `ours-agent${suffix}`, topo.clusterWrap, process.execPath, [
    // The agent's own flags (nodeFlagsFor(version, "agent")), as the CLI would restart it with.
    ...nodeFlagsFor(process.versions.node, "agent"),
    ...(o.agentNodeArgs ?? []),
    o.agentCli ?? o.cli ?? CLI,
    "agent",
    `--proxy-server-host=${topo.agentServerHost}`,
    `--proxy-server-port=${agentPort}`,
    ...agentCertFlags(h.certs, cluster),
    `--cluster-name=${cluster}`,
    `--agent-id=bench-ours-agent${suffix}`,
    "--health-server-host=127.0.0.1",
    `--health-server-port=${await freePort()}`,
    "--admin-server-port=0",
    "--keepalive-time=30s",
    "--keepalive-timeout=10s",
    "--log-level=warn",
    // The conns scenario holds 10,000 connections through this agent's one tunnel: past the
    // default dial caps (4,096 per tunnel, 8,192 in all; docs/hostile-clients.md). Go's agent has none.
    "--max-dials=12000",
    "--max-dials-per-tunnel=12000",
    ...(o.agentArgs ?? []),
  ]);
}

export async function startOurs(h: Harness, topo: Topology, o: StackOptions = {}): Promise<Stack> {
  const [grpc, connect, agentPort, health] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const c = h.certs;
  // The CLI's flags for this node (nodeFlagsFor); a later `--initial-old-space-size=0` undoes the floor.
  const nodeArgs = [
    ...NODE_FLAGS,
    ...(o.cpuProfDir ? ["--cpu-prof", `--cpu-prof-dir=${o.cpuProfDir}`] : []),
    ...(o.serverNodeArgs ?? []),
  ];
  const cli = o.cli ?? CLI;
  const server = h.spawnProc("ours-server", process.execPath, [
    ...nodeArgs,
    cli,
    "server",
    "--mode=both",
    "--server-bind-address=127.0.0.1",
    `--server-port=${grpc}`,
    `--http-connect-port=${connect}`,
    `--agent-bind-address=${topo.agentBind}`,
    `--agent-port=${agentPort}`,
    "--health-bind-address=127.0.0.1",
    `--health-port=${health}`,
    "--admin-bind-address=127.0.0.1",
    "--admin-port=0",
    ...serverCertFlags(c),
    "--proxy-strategies=destHost",
    "--log-level=warn",
    // Extra flags for our server, e.g. BENCH_OUR_SERVER_ARGS="--agent-identity=shared".
    ...(process.env["BENCH_OUR_SERVER_ARGS"] ?? "").split(" ").filter(Boolean),
    ...(o.serverArgs ?? []),
  ]);
  await waitFor(`our server health\n${server.output()}`, async () => {
    return (await httpGet(`http://127.0.0.1:${health}/healthz`)).status === 200;
  });
  let agent: Proc | undefined;
  if (!o.noAgent) {
    agent = await spawnOurAgent(h, topo, agentPort, o);
    const a = agent;
    await waitFor("our agent connected", () => readyz(health), 20_000).catch((e: Error) => {
      throw new Error(`${e.message}\nserver: ${server.output()}\nagent: ${a.output()}`);
    });
  }
  // `<host>.<cluster>` is routed to the agent serving <cluster> and dialled as <host> there.
  return stack("ours", h, server, agent, { grpc, connect, agent: agentPort, health }, `127.0.0.1.${CLUSTER}`);
}

/**
 * bench/relay-floor.ts (plain Node.js server and agent with our design and nothing else) as a
 * stack: the floor of any Node.js implementation on the new-connection path.
 */
export async function startRelayFloor(
  h: Harness,
  o: { ourAgent?: StackOptions; serverNodeArgs?: string[]; agentNodeArgs?: string[] } = {},
): Promise<Stack> {
  const c = h.certs;
  const server = h.spawnProc("relay-floor-server", process.execPath, [
    ...NODE_FLAGS,
    ...(o.serverNodeArgs ?? []),
    ...TS_NODE,
    join(BENCH, "relay-floor.ts"),
    "server",
    c.server.cert,
    c.server.key,
    c.clientCa.cert,
    c.agentCa.cert,
  ]);
  const ports = await firstJsonLine<{ port: number; agentPort: number }>(server, "relay floor ports");
  const cert = c.agents.get(CLUSTER)!;
  // With `ourAgent`: our agent against the floor's server, to tell the server's share from the agent's.
  const agent = o.ourAgent
    ? await spawnOurAgent(h, LOOPBACK, ports.agentPort, { agentNodeArgs: o.agentNodeArgs, ...o.ourAgent })
    : h.spawnProc("relay-floor-agent", process.execPath, [
        ...NODE_FLAGS,
        ...(o.agentNodeArgs ?? []),
        ...TS_NODE,
        join(BENCH, "relay-floor.ts"),
        "agent",
        String(ports.agentPort),
        c.ca.cert,
        cert.cert,
        cert.key,
      ]);
  await waitFor(`relay floor agent connected\n${agent.output()}`, () =>
    o.ourAgent ? server.output().includes("agent connected") : agent.output().includes("connected"),
  );
  return stack("floor", h, server, agent, { grpc: ports.port, agent: ports.agentPort, health: 0 }, "127.0.0.1");
}

export async function startGo(h: Harness, topo: Topology, bin: string, o: StackOptions = {}): Promise<Stack> {
  const [grpc, agentPort, health, admin, agentHealth, agentAdmin] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const c = h.certs;
  const server = h.spawnProc("go-server", join(bin, "proxy-server"), [
    "--mode=grpc",
    "--server-bind-address=127.0.0.1",
    `--server-port=${grpc}`,
    `--agent-bind-address=${topo.agentBind}`,
    `--agent-port=${agentPort}`,
    "--health-bind-address=127.0.0.1",
    `--health-port=${health}`,
    "--admin-bind-address=127.0.0.1",
    `--admin-port=${admin}`,
    ...serverCertFlags(c),
    "--proxy-strategies=destHost",
    "--server-count=1",
    "--server-id=bench-go-server",
    "-v=0",
  ]);
  await waitFor(`Go server health\n${server.output()}`, async () => {
    return (await httpGet(`http://127.0.0.1:${health}/healthz`)).status === 200;
  });
  let agent: Proc | undefined;
  if (!o.noAgent) {
    agent = spawnWrapped(h, "go-agent", topo.clusterWrap, join(bin, "proxy-agent"), [
      `--proxy-server-host=${topo.agentServerHost}`,
      `--proxy-server-port=${agentPort}`,
      ...agentCertFlags(h.certs, CLUSTER),
      "--agent-id=bench-go-agent",
      "--agent-identifiers=ipv4=127.0.0.1",
      "--health-server-host=127.0.0.1",
      `--health-server-port=${agentHealth}`,
      "--admin-bind-address=127.0.0.1",
      `--admin-server-port=${agentAdmin}`,
      "--sync-interval=100ms",
      "--sync-interval-cap=1s",
      "-v=0",
    ]);
    const a = agent;
    await waitFor("Go agent connected", () => readyz(health), 20_000).catch((e: Error) => {
      throw new Error(`${e.message}\nserver: ${server.output()}\nagent: ${a.output()}`);
    });
  }
  return stack("go", h, server, agent, { grpc, agent: agentPort, health }, "127.0.0.1");
}

// ---------------------------------------------------------------------------------------------
// Opening connections

export type Opener = (port: number) => Promise<Duplex>;

export async function openDirect(host: string, port: number): Promise<net.Socket> {
  const s = net.connect({ host, port, noDelay: true });
  await withTimeout(once(s, "connect"), 20_000, `connect ${host}:${port}`);
  return s;
}

/** The reusable-client opener of a path (direct: a plain TCP connect). */
export function opener(path: PathName, topo: Topology, st: Stack | undefined): Opener {
  if (path === "direct" || !st) return (port) => openDirect(topo.directHost, port);
  return (port) => st.client.dial(`${st.dialHost}:${port}`);
}

/** A new HTTP/2 session (TLS handshake) per connection, like Go's CreateSingleUseGrpcTunnel. */
export function singleUseOpener(st: Stack): Opener {
  return (port) => dial(`${st.dialHost}:${port}`, { proxy: st.proxy, timeoutMs: 20_000 });
}

/** Through our HTTP CONNECT door (mTLS). */
export function connectOpener(st: Stack): Opener {
  const port = st.connectPort;
  if (!port) throw new Error(`${st.path} has no HTTP CONNECT door`);
  return async (target) => {
    const s = await dialConnect(`${st.dialHost}:${target}`, {
      proxy: { ...st.proxy, port },
      timeoutMs: 20_000,
    });
    s.setNoDelay(true);
    return s;
  };
}

/** Resolve once `n` bytes arrived on `s` (counting from now); rejects on error/close first. */
function readBytes(s: Duplex, n: number): Promise<void> {
  return new Promise((resolveRead, reject) => {
    let got = 0;
    const onData = (c: Buffer): void => {
      got += c.length;
      if (got >= n) {
        cleanup();
        resolveRead();
      }
    };
    const onEnd = (): void => {
      cleanup();
      reject(new Error(`connection ended after ${got} of ${n} bytes`));
    };
    const onError = (e: Error): void => {
      cleanup();
      reject(e);
    };
    const cleanup = (): void => {
      s.off("data", onData);
      s.off("end", onEnd);
      s.off("error", onError);
    };
    s.on("data", onData);
    s.once("end", onEnd);
    s.once("error", onError);
  });
}

async function writeAll(s: Duplex, total: number, chunk: Buffer): Promise<void> {
  let closed = false;
  let wake: (() => void) | undefined;
  const onClose = (): void => {
    closed = true;
    wake?.();
  };
  s.once("close", onClose);
  try {
    for (let sent = 0; sent < total;) {
      if (closed) throw new Error("closed while writing");
      const n = Math.min(chunk.length, total - sent);
      sent += n;
      if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
        await new Promise<void>((resolveDrain) => {
          wake = resolveDrain;
          s.once("drain", resolveDrain);
        });
      }
    }
  } finally {
    s.off("close", onClose);
  }
}

const CHUNK = Buffer.alloc(64 * 1024, 0x42);

// ---------------------------------------------------------------------------------------------
// Scenario 1/2: bulk transfer on one connection

export interface CpuPids {
  server?: number | undefined;
  agent?: number | undefined;
  target?: number | undefined;
}

export interface BulkResult {
  mbps: number;
  seconds: number;
  bytes: number;
  /** CPU seconds per GB (1e9 bytes) for each process. */
  cpuPerGB: { client: number; server: number; agent: number; target: number };
}

export async function bulk(
  open: Opener,
  port: number,
  direction: "upload" | "download",
  bytes: number,
  pids: CpuPids,
): Promise<BulkResult> {
  const s = await open(port);
  s.on("error", () => undefined);
  try {
    const cpu0 = {
      client: selfCpuSeconds(),
      server: cpuSeconds(pids.server),
      agent: cpuSeconds(pids.agent),
      target: cpuSeconds(pids.target),
    };
    const t0 = performance.now();
    if (direction === "upload") {
      const ok = readBytes(s, 3);
      s.write(`sink ${bytes}\n`);
      await withTimeout(Promise.all([writeAll(s, bytes, CHUNK), ok]), 180_000, "upload");
    } else {
      const got = readBytes(s, bytes);
      s.write(`source ${bytes}\n`);
      await withTimeout(got, 180_000, "download");
    }
    const seconds = (performance.now() - t0) / 1000;
    const gb = bytes / 1e9;
    return {
      mbps: (bytes * 8) / seconds / 1e6,
      seconds,
      bytes,
      // NaN where the path has no such process (direct: no server, no agent).
      cpuPerGB: {
        client: (selfCpuSeconds() - cpu0.client) / gb,
        server: pids.server ? (cpuSeconds(pids.server) - cpu0.server) / gb : NaN,
        agent: pids.agent ? (cpuSeconds(pids.agent) - cpu0.agent) / gb : NaN,
        target: (cpuSeconds(pids.target) - cpu0.target) / gb,
      },
    };
  } finally {
    s.destroy();
  }
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: many concurrent bulk downloads

export interface ManyResult {
  conns: number;
  mbps: number;
  /** Slowest connection's bytes over the mean (1 = perfectly fair). */
  fairness: number;
}

/**
 * `conns` concurrent downloads: the bytes each moved over `durationMs` after a ramp-up, and the
 * seconds that window really took.
 */
export async function manyBytes(
  open: Opener,
  port: number,
  conns: number,
  durationMs: number,
): Promise<{ bytes: number[]; secs: number }> {
  const sockets: Duplex[] = [];
  try {
    for (let i = 0; i < conns; i++) {
      const s = await open(port);
      s.on("error", () => undefined);
      sockets.push(s);
    }
    const counts = new Array<number>(conns).fill(0);
    sockets.forEach((s, i) => s.on("data", (c: Buffer) => void (counts[i] = counts[i]! + c.length)));
    for (const s of sockets) s.write("stream\n");
    await sleep(Math.min(500, durationMs / 4)); // ramp up
    const start = counts.slice();
    const t0 = performance.now();
    await sleep(durationMs);
    const secs = (performance.now() - t0) / 1000;
    return { bytes: counts.map((c, i) => c - start[i]!), secs };
  } finally {
    for (const s of sockets) s.destroy();
    await sleep(300);
  }
}

export async function many(open: Opener, port: number, conns: number, durationMs: number): Promise<ManyResult> {
  const { bytes: got, secs } = await manyBytes(open, port, conns, durationMs);
  const total = got.reduce((a, b) => a + b, 0);
  const mean = total / conns;
  return { conns, mbps: (total * 8) / secs / 1e6, fairness: mean > 0 ? Math.min(...got) / mean : 0 };
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: latency

export interface RttResult {
  p50: number;
  p99: number;
  p999: number;
  count: number;
}

/** 64-byte request/response round trips on one established connection (µs). */
export async function rtt(open: Opener, echoPort: number, count: number, maxMs: number): Promise<RttResult> {
  const s = await open(echoPort);
  s.on("error", () => undefined);
  const msg = Buffer.alloc(64, 7);
  const samples: number[] = [];
  try {
    // Warm-up: the first round trips include lazy set-up.
    for (let i = 0; i < 20; i++) {
      const r = readBytes(s, 64);
      s.write(msg);
      await withTimeout(r, 10_000, "rtt warm-up");
    }
    const deadline = performance.now() + maxMs;
    for (let i = 0; i < count && performance.now() < deadline; i++) {
      const t0 = performance.now();
      const r = readBytes(s, 64);
      s.write(msg);
      await withTimeout(r, 10_000, "rtt");
      samples.push((performance.now() - t0) * 1000);
    }
  } finally {
    s.destroy();
  }
  samples.sort((a, b) => a - b);
  return {
    p50: percentile(samples, 50),
    p99: percentile(samples, 99),
    p999: percentile(samples, 99.9),
    count: samples.length,
  };
}

/** Dial, send one byte, get it back (ms per connection). */
export async function firstByte(open: Opener, echoPort: number, count: number, maxMs: number): Promise<number[]> {
  const out: number[] = [];
  const deadline = performance.now() + maxMs;
  for (let i = 0; i < count && performance.now() < deadline; i++) {
    const t0 = performance.now();
    const s = await withTimeout(open(echoPort), 20_000, "first-byte dial");
    s.on("error", () => undefined);
    const r = readBytes(s, 1);
    s.write("x");
    await withTimeout(r, 10_000, "first byte");
    out.push(performance.now() - t0);
    s.destroy();
  }
  return out;
}

/**
 * `count` new connections to `echoPort` through `st`, each on its own single-use tunnel of the
 * real Go konnectivity-client (test/infra/go-peers/client, `--mode=firstbyte`, which times them
 * itself: its process start is not counted); the times to the first echoed byte (ms).
 */
export async function goClientFirstBytes(h: Harness, st: Stack, echoPort: number, count: number): Promise<number[]> {
  const r = await new GoClientDriver(h, () => st.grpcPort).run(
    ["--mode=firstbyte", `--address=${st.dialHost}:${echoPort}`, `--count=${count}`, "--timeout=20s"],
    "go-client-first-byte",
  );
  const line = r.stdout.split("\n").find((l) => l.startsWith("first-byte-ms "));
  if (r.code !== 0 || !line)
    throw new Error(`Go client first byte through ${st.path}: ${r.stderr.trim() || `exit ${r.code}`}`);
  return line.split(" ").slice(1).map(Number);
}

// ---------------------------------------------------------------------------------------------
// Scenario 5: dial rate

export interface DialRateResult {
  /** Completed dial+request+close cycles per second, one figure per window. */
  windows: number[];
  errors: number;
  lastError: string;
}

export async function dialRate(
  open: Opener,
  echoPort: number,
  windows: number,
  windowMs: number,
  concurrency: number,
): Promise<DialRateResult> {
  const counts = new Array<number>(windows).fill(0);
  const t0 = performance.now();
  const end = t0 + windows * windowMs;
  const msg = Buffer.alloc(16, 1);
  let errors = 0;
  let lastError = "";
  const MAX_CYCLES = 10_000_000;
  let cycles = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < end && cycles++ < MAX_CYCLES && errors < 1000) {
      try {
        const left = Math.max(1000, end - performance.now() + 2000);
        const s = await withTimeout(open(echoPort), Math.min(20_000, left), "dial");
        s.on("error", () => undefined);
        const r = readBytes(s, msg.length);
        s.write(msg);
        await withTimeout(r, Math.min(10_000, left), "dial-rate echo");
        s.destroy();
        const t = performance.now();
        const w = Math.floor((t - t0) / windowMs);
        if (w < windows) counts[w] = counts[w]! + 1;
      } catch (e) {
        errors++;
        lastError = errorMessage(e);
        await sleep(10);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, () => worker()));
  return { windows: counts.map((c) => c / (windowMs / 1000)), errors, lastError };
}

// ---------------------------------------------------------------------------------------------
// Scenario 6b: idle connections through one agent

export interface IdleConnResult {
  conns: number;
  serverBytesPerConn: number;
  agentBytesPerConn: number;
  serverRssMiB: number;
  agentRssMiB: number;
}

export async function idleConns(st: Stack, echoPort: number, n: number, concurrency: number): Promise<IdleConnResult> {
  const open = opener(st.path === "go" ? "go" : "ours", LOOPBACK, st);
  const serverPid = st.server.child.pid;
  const agentPid = st.agent?.child.pid;
  await sleep(1000);
  const before = { server: rssBytes(serverPid), agent: rssBytes(agentPid) };
  const sockets: Duplex[] = [];
  let next = 0;
  let failed = 0;
  let lastError = "";
  const deadline = performance.now() + 180_000;
  const worker = async (): Promise<void> => {
    while (next < n && performance.now() < deadline && failed < 100) {
      next++;
      try {
        const s = await withTimeout(open(echoPort), 30_000, "idle dial");
        s.on("error", () => undefined);
        sockets.push(s);
      } catch (e) {
        failed++;
        lastError = errorMessage(e);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, () => worker()));
    if (sockets.length < n) throw new Error(`only ${sockets.length} of ${n} idle connections opened: ${lastError}`);
    await sleep(3000);
    const after = { server: rssBytes(serverPid), agent: rssBytes(agentPid) };
    return {
      conns: sockets.length,
      serverBytesPerConn: (after.server - before.server) / sockets.length,
      agentBytesPerConn: (after.agent - before.agent) / sockets.length,
      serverRssMiB: after.server / MiB,
      agentRssMiB: after.agent / MiB,
    };
  } finally {
    for (const s of sockets) s.destroy();
    await sleep(1000);
  }
}

// ---------------------------------------------------------------------------------------------
// Scenario 6a: many idle agents on one server

export interface AgentScaleResult {
  agents: number;
  processes: number;
  baselineRssMiB: number;
  rssMiB: number;
  bytesPerAgent: number;
  /**
   * RSS growth per agent of the second half of the agents only (they connect after the first
   * half is in): the marginal cost, without one-off growth such as the JS engine's young
   * generation expanding during the first burst of connections.
   */
  marginalBytesPerAgent?: number;
  /** Server CPU while idle with every agent connected, in % of one core. */
  idleCpuPercent: number;
  connectSeconds: number;
  /** CPU seconds per agent while they connected: the server's, and the load agents' (all processes). */
  serverCpuMsPerAgent?: number;
  loadAgentCpuMsPerAgent?: number;
  /** Highest server RSS sampled (every 100 ms) while the agents connected, and over the baseline per agent. */
  peakRssMiB?: number;
  peakBytesPerAgent?: number;
  /** RSS again after `settledAfterS` seconds of idling (see AgentFleet.settle). */
  settledAfterS?: number;
  settledRssMiB?: number;
  settledBytesPerAgent?: number;
}

/** Idle agents held on a server (agentFleet) until released. */
export interface AgentFleet {
  result: AgentScaleResult;
  /**
   * Wait until `ms` after the last agent connected, then record the server's RSS again in the
   * result: a garbage-collected server gives back memory it grew while agents connected (node
   * shrinks V8's young generation once the process has been idle for a while).
   */
  settle(ms: number): Promise<void>;
  /**
   * The reconnect storm: every load agent drops its connection and reconnects at once (with its
   * TLS session when the fleet was started with `resume`); resolves when all have reported.
   */
  reconnect(): Promise<ReconnectStorm>;
  /** Kill the load agents. */
  release(): Promise<void>;
}

/** What a fleet's reconnect storm took. */
export interface ReconnectStorm {
  agents: number;
  /** Until the last agent was back (the slowest load-agent process's own count). */
  seconds: number;
  /** Reconnections that resumed a TLS session. */
  resumed: number;
  /** The server's CPU per agent from the signal until all were back. */
  serverCpuMsPerAgent: number;
}

/** Connect idle agents to `st` and measure; the agents stay until the fleet is released. */
export async function agentFleet(
  h: Harness,
  st: Stack,
  agents: number,
  processes: number,
  idleMs: number,
  identifiers: string,
  cluster: string = CLUSTER,
  options: { resume?: boolean } = {},
): Promise<AgentFleet> {
  const pid = st.server.child.pid;
  await sleep(1500);
  const baseline = rssBytes(pid);
  const cert = h.certs.agents.get(cluster)!;
  const per = Math.ceil(agents / processes);
  const procs: Proc[] = [];
  const spawn = (p: number): void => {
    const count = Math.min(per, agents - p * per);
    if (count <= 0) return;
    procs.push(
      h.spawnProc(`load-agent-${p}`, process.execPath, [
        ...TS_NODE,
        join(BENCH, "load-agent.ts"),
        JSON.stringify({
          host: "127.0.0.1",
          port: st.agentPort,
          count,
          ca: h.certs.ca.cert,
          cert: cert.cert,
          key: cert.key,
          idPrefix: `${st.path}-load-${p}`,
          identifiers,
          concurrency: 16,
          resume: options.resume === true,
        }),
      ]),
    );
  };
  /** Resolves with the number of agents connected once every process so far has reported. */
  const allConnected = async (): Promise<number> => {
    let connected = 0;
    await waitFor(
      `${agents} load agents connected`,
      () => {
        const lines = procs.map((p) => /connected (\d+) failed (\d+)(.*)/.exec(p.output()));
        if (lines.some((m) => m === null)) return false;
        connected = lines.reduce((a, m) => a + Number(m![1]), 0);
        const failed = lines.reduce((a, m) => a + Number(m![2]), 0);
        if (failed > 0) throw new Error(`${failed} load agents failed: ${lines.map((m) => m![3]).join(" ")}`);
        return true;
      },
      180_000,
      200,
    ).catch((e: Error) => {
      throw new Error(`${e.message}\n${procs.map((p) => p.output()).join("\n")}`);
    });
    return connected;
  };
  let peak = baseline;
  const sampler = setInterval(() => void (peak = Math.max(peak, rssBytes(pid))), 100);
  const t0 = performance.now();
  const serverCpu0 = cpuSeconds(pid);
  /** CPU seconds of the load agents so far (their processes' own, read before they are killed). */
  const loadCpu = (): number => procs.reduce((a, p) => a + cpuSeconds(p.child.pid), 0);
  try {
    // Two halves: the RSS between them gives the marginal cost of an agent (see AgentScaleResult).
    const firstProcs = Math.max(1, Math.floor(processes / 2));
    for (let p = 0; p < firstProcs; p++) spawn(p);
    const firstHalf = processes > 1 ? await allConnected() : 0;
    const pause0 = performance.now();
    if (firstHalf > 0) await sleep(3000);
    const halfRss = rssBytes(pid);
    const paused = performance.now() - pause0;
    for (let p = firstProcs; p < processes; p++) spawn(p);
    const connected = await allConnected();
    const connectSeconds = (performance.now() - t0 - paused) / 1000;
    const serverCpuMsPerAgent = ((cpuSeconds(pid) - serverCpu0) / connected) * 1000;
    const loadAgentCpuMsPerAgent = (loadCpu() / connected) * 1000;
    const connectedAt = performance.now();
    clearInterval(sampler);
    peak = Math.max(peak, rssBytes(pid));
    await sleep(3000);
    const cpu0 = cpuSeconds(pid);
    const c0 = performance.now();
    await sleep(idleMs);
    const idleCpuPercent = ((cpuSeconds(pid) - cpu0) / ((performance.now() - c0) / 1000)) * 100;
    const rss = rssBytes(pid);
    const result: AgentScaleResult = {
      agents: connected,
      processes: procs.length,
      baselineRssMiB: baseline / MiB,
      rssMiB: rss / MiB,
      bytesPerAgent: (rss - baseline) / connected,
      ...(firstHalf > 0 && connected > firstHalf
        ? { marginalBytesPerAgent: (rss - halfRss) / (connected - firstHalf) }
        : {}),
      idleCpuPercent,
      connectSeconds,
      serverCpuMsPerAgent,
      loadAgentCpuMsPerAgent,
      peakRssMiB: peak / MiB,
      peakBytesPerAgent: (peak - baseline) / connected,
    };
    const release = async (): Promise<void> => void (await Promise.all(procs.map((p) => p.kill("SIGKILL"))));
    const reconnect = async (): Promise<ReconnectStorm> => {
      const cpu0 = cpuSeconds(pid);
      for (const p of procs) p.child.kill("SIGUSR2");
      const pattern = /reconnected (\d+) failed (\d+) resumed (\d+) in (\d+)(.*)/;
      let reports: RegExpExecArray[] = [];
      await waitFor(
        `${connected} load agents reconnected`,
        () => {
          const lines = procs.map((p) => pattern.exec(p.output()));
          if (lines.some((m) => m === null)) return false;
          reports = lines.filter((m) => m !== null);
          return true;
        },
        300_000,
        100,
      );
      const sum = (i: number): number => reports.reduce((a, m) => a + Number(m[i]), 0);
      if (sum(2) > 0)
        throw new Error(`${sum(2)} load agents failed to reconnect: ${reports.map((m) => m[5]).join(" ")}`);
      return {
        agents: sum(1),
        seconds: Math.max(...reports.map((m) => Number(m[4]))) / 1000,
        resumed: sum(3),
        serverCpuMsPerAgent: ((cpuSeconds(pid) - cpu0) / sum(1)) * 1000,
      };
    };
    return {
      result,
      release,
      reconnect,
      settle: async (ms) => {
        await sleep(connectedAt + ms - performance.now());
        const settled = rssBytes(pid);
        result.settledAfterS = Math.round((performance.now() - connectedAt) / 1000);
        result.settledRssMiB = settled / MiB;
        result.settledBytesPerAgent = (settled - baseline) / connected;
      },
    };
  } catch (e) {
    await Promise.all(procs.map((p) => p.kill("SIGKILL")));
    throw e;
  } finally {
    clearInterval(sampler);
  }
}
