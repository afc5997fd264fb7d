/**
 * `npm --prefix bench run gateway [-- --quick] [--no-build] [--no-watches] [--no-aggregated] [--aggregator-http1]
 * [--paths=a,b] [--levels=1,32] [--cpu-prof=<dir>] [--agent-node-args="..."] [--gateway-node-args="..."]`:
 * what the gateway (docs/design/gateway.md) costs, all on loopback, on the Node.js the image ships.
 *
 * Starts one proxy-server and one proxy-agent (with its gateway endpoint), a stand-in managed
 * kube-apiserver (bench/kube-apiserver-stand-in.ts), a stand-in hub apiserver for TokenReview,
 * SubjectAccessReview, the ManagedCluster and the allowlist ConfigMap
 * (bench/hub-apiserver-stand-in.ts), and `cluster-proxy gateway`. Then, in one run:
 *
 * - requests/s and p50/p99 latency of a small GET at a few concurrency levels, the paths taking
 *   turns: (a) through the gateway (keep-alive client), (b) through the tunnel with the SDK's
 *   reusable TunnelClient and a keep-alive https.Agent (the "direct tunnel"), (c) a new single-use
 *   tunnel per request (dial, TLS, one request, close: the Go addon before upstream
 *   cluster-proxy #368), (d) straight to the apiserver (the floor), and (e) the agent's gateway
 *   endpoint addressed by the bench as the gateway would (the gateway's share of (a) is (a) - (e)),
 *   (f) the aggregated path: a real hub kube-apiserver (etcd and kube-apiserver of the test
 *   environment's binaries, bench/aggregated-hub.ts) authenticates and authorizes the request and
 *   its aggregator proxies it to the same gateway as the front proxy (issue 40: (f) - (a));
 *   with the tunnel dials and apiserver connections each path makes per request; and (i) as (a)
 *   with bench/gateway-floor.ts, a plain Node.js gateway of the same design, in place of ours:
 *   what (a) costs above it is the gateway's own code, a target it misses is out of reach;
 * - N concurrent watches through the one gateway, to three clusters (one agent each): its RSS and CPU
 *   (and the server's and agents') with none open, with all open and idle, and with events flowing.
 *
 * Prints a table and writes bench/results/gateway.json (read by scripts/performance-page.ts).
 * With `--cpu-prof=<dir>` the gateway and the first agent run under `node --cpu-prof` and are
 * stopped with SIGTERM at the end, so their .cpuprofile files land in `<dir>` (summary:
 * `bench/hotpath.ts summary <file>`). `--agent-node-args` and `--gateway-node-args` add node flags
 * to the first agent's and the gateway's (after ours, so a V8 flag given again wins).
 * The aggregator refuses loopback endpoints: for (f) the bench re-runs itself in a network
 * namespace of its own (`unshare --net`: loopback holding one private address, gone with its processes);
 * `--no-aggregated` skips (f) and that namespace (needed when the binaries are not built).
 * Every process it starts is stopped by PID at the end; every loop is bounded in count and time.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import type { ClientRequest } from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { aggregatedClusterPath } from "@cluster-proxy/api";
import { createTunnelHttpsAgent, dial } from "@cluster-proxy/client";
import { ClusterPool } from "@cluster-proxy/gateway";
import { Harness, metricSum } from "../test/framework/harness.js";
import { waitFor } from "../test/framework/waits.js";
import { type Proc } from "../test/framework/process.js";
import {
  AGGREGATED_ENDPOINT_IP,
  findK8sBinaries,
  reexecInOwnNetns,
  startAggregatedHub,
  type AggregatedHub,
} from "./aggregated-hub.js";
import {
  KUBE_APISERVER_NAME,
  startGatewayFloor,
  startGateway,
  startStandIn,
  writeGatewayBenchCerts,
  writeKubeconfig,
  writeServiceAccountDir,
  type Gateway,
  type StandIn,
} from "./gateway-setup.js";
import {
  GATEWAY_PATHS,
  windowSample,
  writeGatewayReport,
  type GatewayPath,
  type GatewayRun,
  type WatchResult,
  type WatchState,
} from "./gateway-report.js";
import type { HubStats } from "./hub-apiserver-stand-in.js";
import {
  keepAliveGet,
  perConnectionGet,
  runLoad,
  streamGet,
  type LoadLimits,
  type RequestSpec,
  type Send,
} from "./http-load.js";
import type { StandInStats } from "./kube-apiserver-stand-in.js";
import {
  BENCH,
  CLUSTER,
  LOOPBACK,
  MiB,
  REPO,
  cpuSeconds,
  rssBytes,
  selfCpuSeconds,
  sleep,
  spawnOurAgent,
  startOurs,
  withTimeout,
  type Stack,
} from "./lib.js";
import { currentRuntime, machineInfo } from "./run-info.js";
import { errorMessage } from "@cluster-proxy/errors";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const watches = !argv.includes("--no-watches");
const aggregated = !argv.includes("--no-aggregated");
/** The hub apiserver's aggregator reaches the gateway over HTTP/1.1 (DISABLE_HTTP2), not HTTP/2. */
const aggregatorHttp1 = argv.includes("--aggregator-http1");
/** `--paths=gateway,frontProxy`: measure only these paths (e.g. to profile one); default every path. */
const onlyPaths = argv
  .find((a) => a.startsWith("--paths="))
  ?.slice("--paths=".length)
  .split(",")
  .filter((p) => p !== "");
/** `--levels=1,8`: measure only these concurrency levels (e.g. to profile one request at a time). */
const onlyLevels = argv
  .find((a) => a.startsWith("--levels="))
  ?.slice("--levels=".length)
  .split(",")
  .map(Number);
if (onlyLevels?.some((l) => !Number.isInteger(l) || l < 1))
  throw new Error(`--levels: want positive whole numbers, e.g. --levels=1,32 (got ${onlyLevels.join(",")})`);
const cpuProfDir = argv.find((a) => a.startsWith("--cpu-prof="))?.slice("--cpu-prof=".length);
const cpuProfArgs = cpuProfDir ? ["--cpu-prof", `--cpu-prof-dir=${cpuProfDir}`] : [];
/** Extra node flags of a process (`--agent-node-args="--max-semi-space-size=16"`), after ours. */
const nodeArgsOf = (name: string): string[] =>
  argv
    .find((a) => a.startsWith(`--${name}-node-args=`))
    ?.slice(`--${name}-node-args=`.length)
    .split(" ")
    .filter(Boolean) ?? [];
const agentNodeArgs = [...cpuProfArgs, ...nodeArgsOf("agent")];
const gatewayNodeArgs = [...cpuProfArgs, ...nodeArgsOf("gateway")];

const P = quick
  ? {
      rounds: 1,
      windowMs: 1500,
      warmupMs: 300,
      levels: [1, 8, 32],
      watches: 200,
      watchClusters: 2,
      stateMs: 3000,
      eventPeriodMs: 1000,
    }
  : {
      rounds: 5,
      windowMs: 3000,
      warmupMs: 500,
      levels: [1, 8, 32],
      watches: 1000,
      watchClusters: 3,
      stateMs: 10_000,
      eventPeriodMs: 1000,
    };
if (onlyLevels) P.levels = onlyLevels;
const LIMITS: Omit<LoadLimits, "durationMs"> = { maxRequests: 500_000, maxErrors: 200, requestTimeoutMs: 10_000 };
/** The hub token of the bench's user (the stand-in hub authenticates any token as `bench`). */
const USER_TOKEN = "bench-user-token";
/** The gateway's own hub credential (its kubeconfig). */
const GATEWAY_HUB_TOKEN = "bench-gateway-hub-token";
/** The agent's ServiceAccount token in the managed cluster. */
const AGENT_SA_TOKEN = "bench-agent-sa-token";
const USER = "bench";
/** The impersonation (e) and (i) send, as the gateway sets it for {@link USER} (the agent accepts `system:authenticated` unprefixed). */
const GATEWAY_IMPERSONATION = { user: `cluster:hub:${USER}`, groups: ["system:authenticated"] };
const PATH = "/api/v1/namespaces/default";
/**
 * The clusters the watches go to, one agent each (the first also carries the request load): an
 * agent's gateway endpoint serves at most 2,048 connections at once (no flag), counting the
 * gateway's idle pooled ones, so 1,000 watches need more than two.
 */
const CLUSTERS = Array.from({ length: P.watchClusters }, (_, i) => (i === 0 ? CLUSTER : `${CLUSTER}-${i + 1}`));
/** The reserved host of the agents' gateway endpoint (docs/design/gateway.md). */
const ENDPOINT_HOST = "gateway.cluster-proxy.invalid";

const log = (s: string): void => void process.stderr.write(`gateway bench: ${s}\n`);
const t0 = Date.now();
const elapsed = (): string => `${((Date.now() - t0) / 1000).toFixed(0)}s`;

const h = new Harness();
/** Clients to destroy at the end (their pooled sockets hold the processes' connections). */
const clients: { destroy(): void }[] = [];
let stack: Stack | undefined;

let cleaned = false;
async function cleanup(): Promise<void> {
  if (cleaned) return;
  cleaned = true;
  for (const c of clients.splice(0)) c.destroy();
  await stack?.stop().catch(() => undefined);
  await h.close().catch(() => undefined);
}
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(sig, () => {
    log(`${sig}: stopping everything we started`);
    void cleanup().then(() => process.exit(130));
  });
}
// A TunnelSocket can fail in the tick its dial resolves, before a listener is attached (bench.ts).
let strayTunnelErrors = 0;
process.on("uncaughtException", (err: Error & { code?: string }) => {
  if (err.code === "CP_ERR_TUNNEL_CLOSED") {
    strayTunnelErrors++;
    return;
  }
  log(`uncaught: ${err.stack ?? String(err)}`);
  void cleanup().then(() => process.exit(1));
});

/** The processes whose CPU and RSS the bench reads. */
interface Pids {
  gateway: number | undefined;
  /** bench/gateway-floor.ts (path (i)). */
  gatewayFloor: number | undefined;
  server: number | undefined;
  /** The agent of {@link CLUSTER}. */
  agent: number | undefined;
  apiserver: number | undefined;
  /** The real hub kube-apiserver of the aggregated path. */
  hub: number | undefined;
  /** Every agent (one per cluster of {@link CLUSTERS}). */
  agents: (number | undefined)[];
}

function cpuNow(pids: Pids): Record<"client" | keyof Pids, number> {
  return {
    client: selfCpuSeconds(),
    gateway: cpuSeconds(pids.gateway),
    gatewayFloor: cpuSeconds(pids.gatewayFloor),
    server: cpuSeconds(pids.server),
    agent: cpuSeconds(pids.agent),
    apiserver: cpuSeconds(pids.apiserver),
    hub: cpuSeconds(pids.hub),
    agents: pids.agents.reduce<number>((a, pid) => a + cpuSeconds(pid), 0),
  };
}

/** Requests/s and latency of every path at every level, the paths taking turns. */
async function measureRequests(
  sends: Partial<Record<GatewayPath, Send>>,
  pids: Pids,
  counts: () => Promise<{ tunnelDials: number; apiserverConnections: number }>,
  aggregatorConnections: () => number,
  run: GatewayRun,
): Promise<void> {
  const paths = (Object.keys(GATEWAY_PATHS) as GatewayPath[]).filter(
    (p) => sends[p] !== undefined && (onlyPaths === undefined || onlyPaths.includes(p)),
  );
  for (let round = 0; round < P.rounds; round++) {
    for (const c of P.levels) {
      // Rotate the order each round, so no path always runs right after another.
      const order = paths.map((_, i) => paths[(i + round) % paths.length]!);
      for (const p of order) {
        const send = sends[p]!;
        await runLoad(send, c, { ...LIMITS, durationMs: P.warmupMs });
        const counts0 = await counts();
        const before = cpuNow(pids);
        const w = await runLoad(send, c, { ...LIMITS, durationMs: P.windowMs });
        const after = cpuNow(pids);
        const upstream = p === "aggregated" ? aggregatorConnections() : undefined;
        const counts1 = await counts();
        const spent = {
          client: after.client - before.client,
          gateway: ["gateway", "aggregated", "frontProxy"].includes(p)
            ? after.gateway - before.gateway
            : p === "gatewayFloor"
              ? after.gatewayFloor - before.gatewayFloor
              : NaN,
          server: p === "direct" || p === "hubVersion" ? NaN : after.server - before.server,
          agent: p === "direct" || p === "hubVersion" ? NaN : after.agent - before.agent,
          apiserver: p === "hubVersion" ? NaN : after.apiserver - before.apiserver,
          hub: p === "aggregated" || p === "hubVersion" ? after.hub - before.hub : NaN,
        };
        const s = windowSample(p, round, w, spent, {
          tunnelDials: counts1.tunnelDials - counts0.tunnelDials,
          apiserverConnections: counts1.apiserverConnections - counts0.apiserverConnections,
        });
        if (upstream !== undefined) s.aggregatorConnections = upstream;
        run.windows.push(s);
        log(
          `  round ${round + 1} c=${c} ${p}: ${s.rps.toFixed(0)} req/s, p50 ${s.p50Ms.toFixed(2)} ms, ` +
            `p99 ${s.p99Ms.toFixed(2)} ms${upstream !== undefined ? `, ${upstream} hub->gateway connections` : ""}${s.errors ? `, ${s.errors} errors (${s.lastError})` : ""}`,
        );
      }
    }
  }
}

/**
 * Watches through the gateway: each request is sent and counted open once the stand-in
 * apiserver holds it (not once its response head arrives: see {@link WatchResult.headsWhileIdle});
 * the event lines the bench receives are counted.
 */
class Watches {
  private readonly agent: https.Agent;
  private readonly requests = new Set<ClientRequest>();
  /** Response heads (200) received. */
  heads = 0;
  lines = 0;
  failed = 0;
  lastError = "";

  constructor(
    private readonly gateway: Gateway,
    ca: Buffer,
    private readonly headers: Record<string, string>,
  ) {
    this.agent = new https.Agent({ keepAlive: true, maxSockets: Infinity, ca });
    clients.push(this.agent);
  }

  private one(cluster: string): void {
    const req = https.request(
      {
        agent: this.agent,
        host: "127.0.0.1",
        port: this.gateway.port,
        path: `/${cluster}/api/v1/namespaces/default/configmaps?watch=true`,
        headers: this.headers,
      },
      (res) => {
        if (res.statusCode !== 200) {
          this.failed++;
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => void (body.length < 300 && (body += c)));
          res.on("end", () => void (this.lastError = `watch: HTTP ${res.statusCode}: ${body.trim()}`));
          return;
        }
        this.heads++;
        res.on("data", (c: Buffer) => {
          for (let i = c.indexOf(10); i >= 0; i = c.indexOf(10, i + 1)) this.lines++;
        });
        res.on("error", () => undefined);
      },
    );
    req.on("error", (e) => {
      this.failed++;
      this.lastError = e.message;
    });
    this.requests.add(req);
    req.on("close", () => this.requests.delete(req));
    req.end();
  }

  /**
   * Send `n` watches, to the clusters in turn, with at most `inFlight` sent but not yet held by
   * the stand-in apiserver (so the set-up paces itself to the machine, as clients that start at
   * different times do), and wait until it holds them all; throws after `limitMs` or a few failures.
   */
  async open(n: number, kube: StandIn, inFlight: number, limitMs: number): Promise<void> {
    const t0 = performance.now();
    let sent = 0;
    let held = 0;
    const give = (why: string): Error =>
      new Error(
        `${held} of ${n} watches reached the apiserver in ${((performance.now() - t0) / 1000).toFixed(0)} s ` +
          `(${this.failed} failed: ${this.lastError}): ${why}`,
      );
    await waitFor(
      `${n} watches at the stand-in apiserver`,
      async () => {
        held = (await kube.stats<StandInStats>()).watches;
        for (; sent < n && sent - held - this.failed < inFlight; sent++) this.one(CLUSTERS[sent % CLUSTERS.length]!);
        return held >= n || this.failed >= 10;
      },
      limitMs,
      100,
    ).catch((e: Error) => {
      throw give(e.message.split("\n")[0] ?? "");
    });
    if (held < n) throw give("too many failed");
  }

  close(): void {
    for (const req of this.requests) req.destroy();
    this.agent.destroy();
  }
}

/** RSS and CPU of the gateway, server and agent over `ms`, and the event lines received meanwhile. */
async function state(pids: Pids, ms: number, kube: StandIn, w: Watches | undefined): Promise<WatchState> {
  const cpu0 = cpuNow(pids);
  const lines0 = w?.lines ?? 0;
  const s0 = performance.now();
  await sleep(ms);
  const secs = (performance.now() - s0) / 1000;
  const cpu1 = cpuNow(pids);
  const pct = (k: keyof Pids): number => ((cpu1[k] - cpu0[k]) / secs) * 100;
  const rss = (pidList: (number | undefined)[]): number =>
    pidList.reduce<number>((a, pid) => a + rssBytes(pid), 0) / MiB;
  return {
    watches: (await kube.stats<StandInStats>()).watches,
    seconds: secs,
    gatewayRssMiB: rssBytes(pids.gateway) / MiB,
    gatewayCpuPercent: pct("gateway"),
    serverRssMiB: rssBytes(pids.server) / MiB,
    serverCpuPercent: pct("server"),
    agentRssMiB: rss(pids.agents),
    agentCpuPercent: pct("agents"),
    eventsPerSecond: ((w?.lines ?? 0) - lines0) / secs,
  };
}

async function measureWatches(
  gateway: Gateway,
  kube: StandIn,
  ca: Buffer,
  headers: Record<string, string>,
  pids: Pids,
  run: GatewayRun,
): Promise<WatchResult> {
  await sleep(2000);
  const none = await state(pids, P.stateMs, kube, undefined);
  log(`  no watches: gateway ${none.gatewayRssMiB.toFixed(1)} MiB, ${none.gatewayCpuPercent.toFixed(2)}% CPU`);
  const w = new Watches(gateway, ca, headers);
  try {
    const o0 = performance.now();
    await w.open(P.watches, kube, 50, 240_000);
    const openSeconds = (performance.now() - o0) / 1000;
    log(
      `  ${P.watches} watches open in ${openSeconds.toFixed(1)} s, ${w.heads} response heads received [${elapsed()}]`,
    );
    await sleep(3000);
    const idle = await state(pids, P.stateMs, kube, w);
    const headsWhileIdle = w.heads;
    log(`  idle: gateway ${idle.gatewayRssMiB.toFixed(1)} MiB, ${idle.gatewayCpuPercent.toFixed(2)}% CPU`);
    kube.command(`events ${P.eventPeriodMs}`);
    await sleep(Math.max(2000, P.eventPeriodMs * 2));
    const flowing = await state(pids, P.stateMs, kube, w);
    kube.command("events 0");
    log(
      `  events: gateway ${flowing.gatewayRssMiB.toFixed(1)} MiB, ${flowing.gatewayCpuPercent.toFixed(2)}% CPU, ` +
        `${flowing.eventsPerSecond.toFixed(0)} events/s received`,
    );
    if (flowing.watches < P.watches)
      run.notes.push(`watches: only ${flowing.watches} still open at the end of the events window`);
    if (headsWhileIdle < P.watches)
      run.notes.push(
        `watches: ${headsWhileIdle} of ${P.watches} response heads reached the client while the watches were idle ` +
          `(${w.heads} once events flowed): the gateway path sends a watch's head only with its first event`,
      );
    return {
      count: P.watches,
      clusters: CLUSTERS.length,
      openSeconds,
      eventPeriodMs: P.eventPeriodMs,
      headsWhileIdle,
      headsAtEnd: w.heads,
      none,
      idle,
      flowing,
    };
  } finally {
    w.close();
    await waitFor(
      "watches closed at the stand-in",
      async () => (await kube.stats<StandInStats>()).watches === 0,
      30_000,
      250,
    ).catch(() =>
      run.notes.push("watches: the stand-in apiserver still had watches open 30 s after the bench closed them"),
    );
  }
}

async function main(): Promise<void> {
  if (!argv.includes("--no-build")) {
    log("building the workspace (npm run build)");
    execFileSync("npm", ["run", "build"], { cwd: REPO, stdio: ["ignore", process.stderr, "inherit"] });
  }
  const unknownPath = onlyPaths?.find((p) => !(p in GATEWAY_PATHS));
  if (unknownPath !== undefined)
    throw new Error(`--paths: no path ${unknownPath} (paths: ${Object.keys(GATEWAY_PATHS).join(", ")})`);
  const k8sBin = aggregated ? findK8sBinaries() : undefined;
  if (aggregated && k8sBin === undefined)
    throw new Error(
      "the aggregated path (f) needs etcd, kube-apiserver and kubectl: none found in " +
        `${process.env["CP_K8S_BIN_DIR"] ?? ".cache/k8s-binaries/*/bin"} ` +
        "(node scripts/k8s-binaries.mjs builds them; CP_K8S_BIN_DIR names another directory). " +
        "Pass --no-aggregated to run without it.",
    );
  // In the parent this never returns: the bench runs again in its own network namespace.
  if (aggregated) await reexecInOwnNetns(log, ["--no-build"]);
  h.dir = await mkdtemp(join(tmpdir(), "cpbench-gateway-"));
  const certs = await writeGatewayBenchCerts(join(h.dir, "pki"), CLUSTERS);
  h.certs = certs.standalone;
  const run: GatewayRun = {
    quick,
    params: { ...P, ...LIMITS },
    machine: machineInfo(),
    runtime: currentRuntime(log),
    notes: [],
    windows: [],
    watches: null,
    hub: null,
    apiserver: null,
    aggregated: null,
  };

  let realHub: AggregatedHub | undefined;
  if (k8sBin !== undefined) {
    log(`starting the real hub (etcd, kube-apiserver from ${k8sBin}) [${elapsed()}]`);
    realHub = await startAggregatedHub(h, k8sBin, join(h.dir, "real-hub"), USER, USER_TOKEN, { aggregatorHttp1 });
    run.aggregated = {
      kubeApiserver: execFileSync(join(k8sBin, "kube-apiserver"), ["--version"], { encoding: "utf8" }).trim(),
      gatewayHttp2MaxStreamsPerConnection: 1000,
      description:
        "etcd + kube-apiserver (RBAC, priority and fairness on as by default, --token-auth-file, the front-proxy flags as " +
        "kubeadm sets them, --enable-aggregator-routing), the APIService and door ClusterRole of the chart; the gateway " +
        `reached at ${AGGREGATED_ENDPOINT_IP} (on loopback of the bench's own network namespace); the gateway reads ` +
        "that hub's kube-system/extension-apiserver-authentication from the stand-in hub (which serves a copy of it), its " +
        "other hub calls (TokenReview, SubjectAccessReview, ManagedClusters) go to the stand-in as for (a)" +
        (aggregatorHttp1 ? "; --aggregator-http1: the aggregator on HTTP/1.1 (DISABLE_HTTP2)" : ""),
    };
    log(`real hub ready on port ${realHub.port} [${elapsed()}]`);
  } else run.notes.push("--no-aggregated: no (f) aggregated path");

  const kube = await startStandIn(
    h,
    "kube-apiserver",
    "kube-apiserver-stand-in.ts",
    { cert: certs.kubeApiserver.cert, key: certs.kubeApiserver.key },
    certs.clusterCa.cert,
  );
  const hub = await startStandIn(
    h,
    "hub-apiserver",
    "hub-apiserver-stand-in.ts",
    {
      cert: certs.hubApiserver.cert,
      key: certs.hubApiserver.key,
      clusters: CLUSTERS,
      user: USER,
      ...(realHub
        ? { configMaps: { "kube-system/extension-apiserver-authentication": realHub.extensionAuthentication } }
        : {}),
    },
    certs.hubCa.cert,
  );
  const saDir = await writeServiceAccountDir(join(h.dir, "serviceaccount"), AGENT_SA_TOKEN, certs.clusterCa.cert);
  const kubeconfig = await writeKubeconfig(
    join(h.dir, "hub.kubeconfig"),
    `https://127.0.0.1:${hub.port}`,
    certs.hubCa.cert,
    GATEWAY_HUB_TOKEN,
  );
  log(`starting proxy-server, proxy-agent and gateway [${elapsed()}]`);
  const agentArgs = [
    `--gateway-ca-file=${certs.gatewayCa.cert}`,
    `--kube-apiserver-url=https://127.0.0.1:${kube.port}`,
    `--service-account-dir=${saDir}`,
  ];
  stack = await startOurs(h, LOOPBACK, { agentArgs, agentNodeArgs });
  const st = stack;
  // The other clusters' agents (for the watches), all reaching the same stand-in apiserver.
  const moreAgents: Proc[] = [];
  for (const cluster of CLUSTERS.slice(1)) {
    const agent = await spawnOurAgent(h, LOOPBACK, st.agentPort, { agentArgs }, cluster);
    moreAgents.push(agent);
    await waitFor(
      `agent of ${cluster} connected\n${agent.output()}`,
      async () => (await metricSum(st.healthPort, `cluster_proxy_server_backends{identifier="${cluster}"}`)) >= 1,
      20_000,
      100,
    );
  }
  // Every watch holds one HTTP/2 stream to the cluster's endpoint (up to 1,000 per session), and
  // the gateway queues requests beyond --max-connections-per-cluster sessions (default 4) full:
  // room for all of them.
  const maxConnectionsPerCluster = Math.max(4, Math.ceil(P.watches / 1000) + 2);
  const gatewayConfig = {
    certs,
    proxyServerPort: stack.grpcPort,
    hubKubeconfig: kubeconfig,
    auditLog: join(h.dir, "audit.log"),
    maxConnectionsPerCluster,
    nodeArgs: gatewayNodeArgs,
  };
  const gateway = await startGateway(h, gatewayConfig);
  const gatewayFloor = await startGatewayFloor(h, gatewayConfig, CLUSTER, GATEWAY_IMPERSONATION);
  run.notes.push(
    `gateway started with --max-connections-per-cluster=${maxConnectionsPerCluster} (HTTP/2 sessions, default 4, each up ` +
      `to the agent's 1,000 streams: requests beyond them queue); audit log to a file`,
  );

  const servingCa = readFileSync(certs.standalone.ca.cert);
  if (realHub) {
    await realHub.registerGateway(gateway.port, servingCa);
    log(`the APIService is Available [${elapsed()}]`);
  }
  const clusterCa = readFileSync(certs.clusterCa.cert);
  const headers = { authorization: `Bearer ${USER_TOKEN}`, accept: "application/json" };
  const maxSockets = Math.max(...P.levels);
  const gatewayAgent = new https.Agent({ keepAlive: true, maxSockets, ca: servingCa });
  const tunnelAgent = createTunnelHttpsAgent({
    client: stack.client,
    keepAlive: true,
    maxSockets,
    ca: clusterCa,
    servername: KUBE_APISERVER_NAME,
  });
  const directAgent = new https.Agent({ keepAlive: true, maxSockets, ca: clusterCa });
  const aggregatedAgent = new https.Agent({ keepAlive: true, maxSockets, ca: realHub?.ca ?? servingCa });
  // As the gateway reaches the endpoint: its own session code (HTTP/2 over a tunnel dial, mutual
  // TLS with its identity, the agent CA, the cluster's URI SAN).
  const client = stack.client;
  const endpointPool = new ClusterPool(
    (address, signal) => client.dial(address, { timeoutMs: LIMITS.requestTimeoutMs, ...(signal ? { signal } : {}) }),
    {
      ca: readFileSync(certs.standalone.agentCa.cert),
      cert: readFileSync(certs.gatewayIdentity.cert),
      key: readFileSync(certs.gatewayIdentity.key),
    },
    4,
  );
  const endpointSessions = endpointPool.sessionsFor(CLUSTER);
  // As the hub's aggregator reaches the gateway, without the hub: one HTTP/2 session (made again
  // when it closes) with the front-proxy client certificate.
  let frontProxySession: http2.ClientHttp2Session | undefined;
  const frontProxyClient = realHub?.frontProxyClient;
  const frontProxyOpen = (
    headers: http2.OutgoingHttpHeaders,
    signal: AbortSignal,
  ): Promise<http2.ClientHttp2Stream> => {
    if (!frontProxyClient) return Promise.reject(new Error("no front-proxy certificate"));
    if (!frontProxySession || frontProxySession.closed || frontProxySession.destroyed) {
      frontProxySession = http2.connect(`https://127.0.0.1:${gateway.port}`, {
        ca: servingCa,
        cert: readFileSync(frontProxyClient.cert),
        key: readFileSync(frontProxyClient.key),
        servername: "localhost",
      });
      frontProxySession.on("error", () => undefined);
    }
    return Promise.resolve(frontProxySession.request(headers, { signal }));
  };
  clients.push(gatewayAgent, tunnelAgent, directAgent, aggregatedAgent, endpointPool, {
    destroy: () => frontProxySession?.destroy(),
  });
  const spec: RequestSpec = { path: PATH, headers };
  const proxy = stack.proxy;
  const sends: Partial<Record<GatewayPath, Send>> = {
    gateway: keepAliveGet(gatewayAgent, "127.0.0.1", gateway.port, { path: `/${CLUSTER}${PATH}`, headers }),
    ...(realHub
      ? {
          aggregated: keepAliveGet(aggregatedAgent, "127.0.0.1", realHub.port, {
            path: `${aggregatedClusterPath(CLUSTER)}${PATH}`,
            headers,
          }),
          hubVersion: keepAliveGet(aggregatedAgent, "127.0.0.1", realHub.port, { path: "/version", headers }),
          frontProxy: streamGet(frontProxyOpen, `127.0.0.1:${gateway.port}`, {
            path: `${aggregatedClusterPath(CLUSTER)}${PATH}`,
            headers: { "x-remote-user": USER, "x-remote-group": ["system:authenticated"], accept: "application/json" },
          }),
        }
      : {}),
    gatewayFloor: keepAliveGet(gatewayAgent, "127.0.0.1", gatewayFloor.port, { path: `/${CLUSTER}${PATH}`, headers }),
    tunnel: keepAliveGet(tunnelAgent, `127.0.0.1.${CLUSTER}`, kube.port, spec),
    tunnelPerRequest: perConnectionGet(
      (signal) => dial(`127.0.0.1.${CLUSTER}:${kube.port}`, { proxy, signal, timeoutMs: LIMITS.requestTimeoutMs }),
      { ca: clusterCa, servername: KUBE_APISERVER_NAME },
      spec,
      KUBE_APISERVER_NAME,
    ),
    direct: keepAliveGet(directAgent, "127.0.0.1", kube.port, spec),
    endpoint: streamGet((h, signal) => endpointSessions.request(h, true, signal), ENDPOINT_HOST, {
      path: PATH,
      headers: {
        "cluster-proxy-target": "kube",
        "impersonate-user": GATEWAY_IMPERSONATION.user,
        "impersonate-group": GATEWAY_IMPERSONATION.groups,
        accept: "application/json",
      },
    }),
  };
  // Each path must work before it is measured; the gateway's request must arrive impersonated.
  const firstRequest = (p: string, send: Send): Promise<void> =>
    withTimeout(send(AbortSignal.timeout(20_000)), 25_000, `first request, ${p}`).catch((e: Error) => {
      throw new Error(
        `${p}: ${e.message}\ngateway: ${gateway.proc.output().slice(-3000)}\nagent: ${stack?.agent?.output().slice(-3000)}`,
      );
    });
  await firstRequest("gateway", sends.gateway!);
  const seen = await kube.stats<StandInStats>();
  if (seen.lastImpersonateUser === "")
    throw new Error("the gateway's request reached the apiserver without Impersonate-User");
  if (sends.aggregated) {
    // Through the hub apiserver, the gateway believes the front proxy's X-Remote-User (the hub
    // does not forward the bearer token): the request arrives as the same user.
    await firstRequest("aggregated", sends.aggregated);
    const viaHub = await kube.stats<StandInStats>();
    log(`(a) reaches the managed apiserver with: ${JSON.stringify(seen.lastImpersonatedHeaders)}`);
    log(`(f) reaches the managed apiserver with: ${JSON.stringify(viaHub.lastImpersonatedHeaders)}`);
    if (viaHub.lastImpersonateUser !== seen.lastImpersonateUser)
      throw new Error(
        `the aggregated path's request arrived as ${viaHub.lastImpersonateUser}, not ${seen.lastImpersonateUser}`,
      );
  }
  for (const [p, send] of Object.entries(sends)) await firstRequest(p, send);
  log(
    `every path answers; the gateway's requests arrive as Impersonate-User ${seen.lastImpersonateUser} [${elapsed()}]`,
  );

  const pids: Pids = {
    gateway: gateway.proc.child.pid,
    gatewayFloor: gatewayFloor.proc.child.pid,
    server: stack.server.child.pid,
    agent: stack.agent?.child.pid,
    apiserver: kube.proc.child.pid,
    hub: realHub?.apiserver.child.pid,
    agents: [stack.agent?.child.pid, ...moreAgents.map((a) => a.child.pid)],
  };
  log(
    `requests: ${P.rounds} rounds x levels ${P.levels.join(", ")} x ${Object.keys(sends).length} paths x ${P.windowMs} ms (+${P.warmupMs} ms warm-up) [${elapsed()}]`,
  );
  const serverHealth = stack.healthPort;
  const counts = async (): Promise<{ tunnelDials: number; apiserverConnections: number }> => ({
    tunnelDials: await metricSum(serverHealth, "konnectivity_network_proxy_server_dial_duration_seconds_count"),
    apiserverConnections: (await kube.stats<StandInStats>()).connections,
  });
  // The hub apiserver's connections to the gateway (from that private address to the gateway's port).
  const aggregatorConnections = (): number =>
    execFileSync("ss", ["-Htn", "state", "established", "dst", `${AGGREGATED_ENDPOINT_IP}:${gateway.port}`], {
      encoding: "utf8",
    })
      .split("\n")
      .filter((l) => l.trim() !== "").length;
  await measureRequests(sends, pids, counts, aggregatorConnections, run);

  if (watches) {
    log(`watches: ${P.watches} through one gateway [${elapsed()}]`);
    try {
      run.watches = await measureWatches(gateway, kube, servingCa, headers, pids, run);
    } catch (e) {
      log(`watches: FAILED: ${errorMessage(e)}`);
      run.notes.push(`watch scenario failed: ${errorMessage(e).split("\n")[0]}`);
    }
  } else {
    run.notes.push("--no-watches: no watch scenario");
  }

  const hubStats = await hub.stats<HubStats>();
  run.hub = hubStats;
  run.apiserver = await kube.stats<StandInStats>();
  if (Object.keys(hubStats.unhandled).length > 0)
    run.notes.push(`the stand-in hub did not know: ${Object.keys(hubStats.unhandled).join(", ")}`);
  if (strayTunnelErrors > 0)
    run.notes.push(`${strayTunnelErrors} tunnelled connection(s) failed with no listener attached yet`);
  if (onlyPaths) run.notes.push(`--paths: only ${onlyPaths.join(", ")} measured`);
  if (quick) run.notes.push(`--quick: ${P.rounds} round of ${P.windowMs} ms windows, ${P.watches} watches (not 1,000)`);
  run.machine["total_seconds"] = Math.round((Date.now() - t0) / 1000);
  writeGatewayReport(run, join(BENCH, "results"));
  if (cpuProfDir) {
    // A profile is written when the process exits: stop both gracefully (a second signal makes
    // the agent exit without waiting for its drain).
    for (const p of [gateway.proc, stack.agent]) {
      if (!p) continue;
      p.child.kill("SIGTERM");
      setTimeout(() => p.child.kill("SIGTERM"), 1000).unref();
      await withTimeout(p.exited, 30_000, `${p.name} exit`).catch((e: Error) => log(e.message));
    }
    log(`CPU profiles in ${cpuProfDir} (summary: bench/hotpath.ts summary <file>)`);
  }
  log(`done in ${elapsed()}`);
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
