/**
 * The results of bench/gateway.ts: the samples of a run ({@link GatewayRun}), what it writes to
 * bench/results/gateway.json ({@link GatewayJson}: medians [min-max] over rounds, the ratios
 * between the paths, the watch figures and the targets) and the table it prints.
 * scripts/performance-page.ts reads gateway.json for docs/reference/performance.md.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { percentileOf, summarize, type Summary } from "./lib.js";
import type { LoadWindow } from "./http-load.js";
import type { Runtime } from "./run-info.js";

/**
 * The ways a small GET reaches the managed apiserver: the four compared, and (e) the agent's
 * gateway endpoint addressed by the bench itself, which tells the gateway's share of (a) from the
 * endpoint's; and (f) the aggregated path: the same GET sent to a real hub kube-apiserver, which
 * authenticates and authorizes it and proxies it to the gateway as its front proxy, and (g) what
 * that hub sends, sent by the bench itself (which of (f) - (a) is the gateway's, which the hub's),
 * (h) `GET /version` of that hub (its filter chain, no proxy: a floor of any request it serves),
 * and (i) (a) with bench/gateway-floor.ts in place of the gateway (the floor of a Node.js gateway).
 */
export type GatewayPath =
  | "gateway"
  | "gatewayFloor"
  | "aggregated"
  | "frontProxy"
  | "hubVersion"
  | "tunnel"
  | "tunnelPerRequest"
  | "direct"
  | "endpoint";

/** The paths in the order of the table, with their labels. */
export const GATEWAY_PATHS: Record<GatewayPath, string> = {
  gateway: "(a) gateway (keep-alive client)",
  aggregated: "(f) aggregated path: real hub kube-apiserver -> gateway (keep-alive client)",
  frontProxy: "(g) the gateway's port as the hub's front proxy, no hub (HTTP/2, front-proxy certificate, X-Remote-*)",
  hubVersion: "(h) GET /version of the hub kube-apiserver (its filter chain, no proxy, no gateway)",
  tunnel: "(b) direct tunnel (SDK TunnelClient + keep-alive agent)",
  tunnelPerRequest: "(c) new tunnel per request (single-use dial, TLS, one request)",
  direct: "(d) no tunnel (floor)",
  endpoint: "(e) the agent's gateway endpoint, no gateway (SDK TunnelClient, gateway identity)",
  gatewayFloor:
    "(i) the floor of a Node.js gateway: bench/gateway-floor.ts in place of the gateway (keep-alive client)",
};

/** CPU time of each process per request in a window (µs); NaN where the path does not pass it. */
export interface CpuPerRequest {
  client: number;
  gateway: number;
  server: number;
  agent: number;
  apiserver: number;
  /** The real hub kube-apiserver (the aggregated path only). */
  hub: number;
}

/** One window of one path at one concurrency. */
export interface WindowSample {
  path: GatewayPath;
  concurrency: number;
  round: number;
  requests: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  lastError: string;
  cpuUsPerRequest: CpuPerRequest;
  /** Tunnel dials the proxy-server saw per request (0 for a pooled path, 1 for a dial per request). */
  tunnelDialsPerRequest: number;
  /** TLS connections the stand-in apiserver accepted per request. */
  apiserverConnectionsPerRequest: number;
  /** The aggregated path: TCP connections from the hub apiserver to the gateway at the end of the window. */
  aggregatorConnections?: number;
}

/** RSS and CPU of the processes on the watch path over a window (agent: the sum over the clusters' agents). */
export interface WatchState {
  /** Watches open at the stand-in apiserver during the window. */
  watches: number;
  seconds: number;
  gatewayRssMiB: number;
  /** % of one core over the window. */
  gatewayCpuPercent: number;
  serverRssMiB: number;
  serverCpuPercent: number;
  agentRssMiB: number;
  agentCpuPercent: number;
  /** Watch events the bench received per second over the window. */
  eventsPerSecond: number;
}

/** The watch scenario: the same gateway with no watches, then `count` open and idle, then with events. */
export interface WatchResult {
  count: number;
  /** The watches go to this many clusters in turn, one agent each. */
  clusters: number;
  /** Time to open them all (s). */
  openSeconds: number;
  /** Each watch gets one event every this many ms while events flow. */
  eventPeriodMs: number;
  /**
   * Watches whose response head (200) had reached the bench while they were idle, and at the
   * end: an apiserver sends a watch's head at once, before any event.
   */
  headsWhileIdle: number;
  headsAtEnd: number;
  none: WatchState;
  idle: WatchState;
  flowing: WatchState;
}

/** Everything a run measured. */
export interface GatewayRun {
  quick: boolean;
  params: Record<string, unknown>;
  machine: Record<string, unknown>;
  runtime: Runtime;
  notes: string[];
  windows: WindowSample[];
  watches: WatchResult | null;
  /** The stand-ins' counters at the end (what reached each apiserver). */
  hub: unknown;
  apiserver: unknown;
  /** The aggregated path's setup, null when it was skipped. */
  aggregated: AggregatedSetup | null;
}

/** How the aggregated path (f) ran. */
export interface AggregatedSetup {
  /** `kube-apiserver --version`. */
  kubeApiserver: string;
  /** The gateway's --http2-max-streams-per-connection (SETTINGS_MAX_CONCURRENT_STREAMS to the aggregator). */
  gatewayHttp2MaxStreamsPerConnection: number;
  /** What the hub's flags and objects are. */
  description: string;
}

/** {@link Summary} rounded for the JSON. */
export interface Stat {
  median: number;
  min: number;
  max: number;
  n: number;
}

/** One path at one concurrency, over the rounds. */
export interface PathSummary {
  rps: Stat | null;
  p50_ms: Stat | null;
  p99_ms: Stat | null;
  errors: number;
  last_error: string;
  /** Median over the rounds of each process's CPU per request (µs). */
  cpu_us_per_request: Partial<Record<keyof CpuPerRequest, number | null>>;
  /** Medians over the rounds: tunnel dials and apiserver TLS connections per request. */
  tunnel_dials_per_request: number | null;
  apiserver_connections_per_request: number | null;
  /** The aggregated path: the hub apiserver's TCP connections to the gateway at the end of each window. */
  aggregator_connections?: number[];
}

/** One target and whether the run met it. */
export interface TargetResult {
  label: string;
  target: string;
  /** The measured value (ms or a ratio, as `target` says). */
  measured: number | null;
  met: boolean | null;
  /** Where it was read (concurrency levels). */
  at: string;
  /**
   * The same measure with (i), the floor of a Node.js gateway, in place of (a), where it has one:
   * a target the floor misses is out of reach of any Node.js gateway of this design.
   */
  floor?: number | null;
}

/** bench/results/gateway.json. */
export interface GatewayJson {
  runtime: Runtime;
  machine: Record<string, unknown>;
  run: { quick: boolean; params: Record<string, unknown>; definitions: string };
  /** By concurrency ("1", "8", ...), then path. */
  requests: Record<string, Record<GatewayPath, PathSummary>>;
  /** By concurrency: ratios of medians between the paths. */
  ratios: Record<string, Record<string, number | null>>;
  watches: WatchResult | null;
  targets: Record<string, TargetResult>;
  notes: string[];
  aggregated: AggregatedSetup | null;
  hub: unknown;
  apiserver: unknown;
  windows: WindowSample[];
}

const r2 = (x: number | undefined | null): number | null =>
  x === undefined || x === null || !Number.isFinite(x) ? null : Math.round(x * 100) / 100;
const r3 = (x: number | undefined | null): number | null =>
  x === undefined || x === null || !Number.isFinite(x) ? null : Math.round(x * 1000) / 1000;

function stat(values: number[], round: (x: number) => number | null = r3): Stat | null {
  const s: Summary | null = summarize(values);
  if (!s) return null;
  return { median: round(s.median) ?? NaN, min: round(s.min) ?? NaN, max: round(s.max) ?? NaN, n: s.n };
}

/** A window's figures from its samples and the CPU the processes spent in it. */
export function windowSample(
  path: GatewayPath,
  round: number,
  w: LoadWindow,
  cpuSeconds: Record<keyof CpuPerRequest, number>,
  counts: { tunnelDials: number; apiserverConnections: number },
): WindowSample {
  const n = w.latencyMs.length;
  const perRequest = (s: number): number => (n > 0 ? (s / n) * 1e6 : NaN);
  return {
    path,
    concurrency: w.concurrency,
    round,
    requests: n,
    seconds: w.seconds,
    rps: n / w.seconds,
    p50Ms: percentileOf(w.latencyMs, 50),
    p99Ms: percentileOf(w.latencyMs, 99),
    errors: w.errors,
    lastError: w.lastError,
    cpuUsPerRequest: {
      client: perRequest(cpuSeconds.client),
      gateway: perRequest(cpuSeconds.gateway),
      server: perRequest(cpuSeconds.server),
      agent: perRequest(cpuSeconds.agent),
      apiserver: perRequest(cpuSeconds.apiserver),
      hub: perRequest(cpuSeconds.hub),
    },
    tunnelDialsPerRequest: n > 0 ? counts.tunnelDials / n : NaN,
    apiserverConnectionsPerRequest: n > 0 ? counts.apiserverConnections / n : NaN,
  };
}

function summarizePath(ws: WindowSample[]): PathSummary {
  const cpu: PathSummary["cpu_us_per_request"] = {};
  for (const k of ["client", "gateway", "server", "agent", "apiserver", "hub"] as const)
    cpu[k] = r2(summarize(ws.map((w) => w.cpuUsPerRequest[k]))?.median);
  return {
    rps: stat(
      ws.map((w) => w.rps),
      r2,
    ),
    p50_ms: stat(ws.map((w) => w.p50Ms)),
    p99_ms: stat(ws.map((w) => w.p99Ms)),
    errors: ws.reduce((a, w) => a + w.errors, 0),
    last_error:
      ws
        .map((w) => w.lastError)
        .filter(Boolean)
        .at(-1) ?? "",
    cpu_us_per_request: cpu,
    tunnel_dials_per_request: r3(summarize(ws.map((w) => w.tunnelDialsPerRequest))?.median),
    apiserver_connections_per_request: r3(summarize(ws.map((w) => w.apiserverConnectionsPerRequest))?.median),
    ...(ws.some((w) => w.aggregatorConnections !== undefined)
      ? { aggregator_connections: ws.map((w) => w.aggregatorConnections ?? NaN) }
      : {}),
  };
}

const PATH_KEYS = Object.keys(GATEWAY_PATHS) as GatewayPath[];

/** The ratios of one concurrency level (medians). */
function ratiosOf(s: Record<GatewayPath, PathSummary>): Record<string, number | null> {
  const div = (a: Stat | null, b: Stat | null): number | null =>
    a && b && b.median > 0 ? r2(a.median / b.median) : null;
  return {
    rps_gateway_over_tunnel: div(s.gateway.rps, s.tunnel.rps),
    rps_gateway_over_tunnel_per_request: div(s.gateway.rps, s.tunnelPerRequest.rps),
    rps_gateway_over_direct: div(s.gateway.rps, s.direct.rps),
    rps_tunnel_over_direct: div(s.tunnel.rps, s.direct.rps),
    p50_gateway_over_tunnel: div(s.gateway.p50_ms, s.tunnel.p50_ms),
    p50_endpoint_over_tunnel: div(s.endpoint.p50_ms, s.tunnel.p50_ms),
    rps_endpoint_over_tunnel: div(s.endpoint.rps, s.tunnel.rps),
    p50_tunnel_per_request_over_tunnel: div(s.tunnelPerRequest.p50_ms, s.tunnel.p50_ms),
    p50_gateway_over_direct: div(s.gateway.p50_ms, s.direct.p50_ms),
    p50_tunnel_over_direct: div(s.tunnel.p50_ms, s.direct.p50_ms),
    p99_gateway_over_tunnel: div(s.gateway.p99_ms, s.tunnel.p99_ms),
    p50_overhead_gateway_minus_tunnel_ms:
      s.gateway.p50_ms && s.tunnel.p50_ms ? r3(s.gateway.p50_ms.median - s.tunnel.p50_ms.median) : null,
    rps_gateway_floor_over_tunnel: div(s.gatewayFloor.rps, s.tunnel.rps),
    rps_gateway_over_gateway_floor: div(s.gateway.rps, s.gatewayFloor.rps),
    p50_overhead_gateway_floor_minus_tunnel_ms:
      s.gatewayFloor.p50_ms && s.tunnel.p50_ms ? r3(s.gatewayFloor.p50_ms.median - s.tunnel.p50_ms.median) : null,
    p50_overhead_endpoint_minus_tunnel_ms:
      s.endpoint.p50_ms && s.tunnel.p50_ms ? r3(s.endpoint.p50_ms.median - s.tunnel.p50_ms.median) : null,
    rps_aggregated_over_gateway: div(s.aggregated.rps, s.gateway.rps),
    rps_aggregated_over_tunnel: div(s.aggregated.rps, s.tunnel.rps),
    p50_aggregated_over_gateway: div(s.aggregated.p50_ms, s.gateway.p50_ms),
    p99_aggregated_over_gateway: div(s.aggregated.p99_ms, s.gateway.p99_ms),
    p50_aggregated_over_tunnel: div(s.aggregated.p50_ms, s.tunnel.p50_ms),
    p50_overhead_aggregated_minus_gateway_ms:
      s.aggregated.p50_ms && s.gateway.p50_ms ? r3(s.aggregated.p50_ms.median - s.gateway.p50_ms.median) : null,
    p50_front_proxy_over_gateway: div(s.frontProxy.p50_ms, s.gateway.p50_ms),
    p50_aggregated_over_front_proxy: div(s.aggregated.p50_ms, s.frontProxy.p50_ms),
    rps_front_proxy_over_gateway: div(s.frontProxy.rps, s.gateway.rps),
    p50_hub_version_over_gateway: div(s.hubVersion.p50_ms, s.gateway.p50_ms),
    p50_overhead_aggregated_minus_front_proxy_ms:
      s.aggregated.p50_ms && s.frontProxy.p50_ms ? r3(s.aggregated.p50_ms.median - s.frontProxy.p50_ms.median) : null,
    p50_overhead_front_proxy_minus_gateway_ms:
      s.frontProxy.p50_ms && s.gateway.p50_ms ? r3(s.frontProxy.p50_ms.median - s.gateway.p50_ms.median) : null,
  };
}

/** Gateway plus agent RSS per idle watch (KiB): (open and idle - none open) / count, undefined without watches. */
function rssPerIdleWatchKiB(w: WatchResult | null): number | null {
  if (!w || w.count <= 0) return null;
  const grown = w.idle.gatewayRssMiB - w.none.gatewayRssMiB + (w.idle.agentRssMiB - w.none.agentRssMiB);
  return r2((grown * 1024) / w.count);
}

/**
 * The targets: issue 39's for the HTTP/2 hop (rate at the highest level against the reusable
 * tunnel, agent CPU per gateway request there, p50 overhead one request at a time, gateway plus
 * agent RSS per idle watch), and the earlier ones (p50 overhead <= 1 ms, rate against a tunnel per request).
 */
function targets(
  requests: GatewayJson["requests"],
  ratios: GatewayJson["ratios"],
  watches: WatchResult | null,
): Record<string, TargetResult> {
  const levels = Object.keys(requests).sort((a, b) => Number(a) - Number(b));
  const first = levels[0];
  const overhead = first === undefined ? null : (ratios[first]?.["p50_overhead_gateway_minus_tunnel_ms"] ?? null);
  const perLevel = levels.map((l) => ratios[l]?.["rps_gateway_over_tunnel_per_request"] ?? null);
  const known = perLevel.filter((x): x is number => x !== null);
  const worst = known.length === perLevel.length && known.length > 0 ? Math.min(...known) : null;
  const top = levels.at(-1);
  const rpsTop = top === undefined ? null : (ratios[top]?.["rps_gateway_over_tunnel"] ?? null);
  const agentCpu = top === undefined ? null : r2(requests[top]?.gateway.cpu_us_per_request?.agent);
  const floorOverhead =
    first === undefined ? null : (ratios[first]?.["p50_overhead_gateway_floor_minus_tunnel_ms"] ?? null);
  const floorRps = top === undefined ? null : (ratios[top]?.["rps_gateway_floor_over_tunnel"] ?? null);
  const floorAgentCpu = top === undefined ? null : r2(requests[top]?.gatewayFloor.cpu_us_per_request?.agent);
  const perWatch = rssPerIdleWatchKiB(watches);
  const aggregated = first === undefined ? null : (ratios[first]?.["p50_overhead_aggregated_minus_gateway_ms"] ?? null);
  return {
    aggregated_p50_overhead_ms: {
      label: "p50 latency overhead of (f) the aggregated path over (a) the gateway's port, one request at a time (ms)",
      target: "<= 1",
      measured: aggregated,
      met: aggregated === null ? null : aggregated <= 1,
      at: `concurrency ${first ?? "n/a"}`,
    },
    rps_over_tunnel: {
      label: "requests/s of (a) the gateway over (b) the reusable tunnel, highest concurrency",
      target: ">= 0.6",
      measured: rpsTop,
      met: rpsTop === null ? null : rpsTop >= 0.6,
      at: `concurrency ${top ?? "n/a"}`,
      floor: floorRps,
    },
    agent_cpu_us_per_request: {
      label: "agent CPU per request of (a) the gateway path, highest concurrency (µs)",
      target: "<= 300",
      measured: agentCpu,
      met: agentCpu === null ? null : agentCpu <= 300,
      at: `concurrency ${top ?? "n/a"}`,
      floor: floorAgentCpu,
    },
    p50_overhead_ms_h2: {
      label: "p50 latency overhead of (a) the gateway over (b) the direct tunnel, one request at a time (ms)",
      target: "<= 0.7",
      measured: overhead,
      met: overhead === null ? null : overhead <= 0.7,
      at: `concurrency ${first ?? "n/a"}`,
      floor: floorOverhead,
    },
    rss_per_idle_watch_kib: {
      label: "gateway plus agent RSS per idle watch (KiB)",
      target: "<= 40",
      measured: perWatch,
      met: perWatch === null ? null : perWatch <= 40,
      at: watches ? `${watches.count} watches` : "no watch scenario",
    },
    p50_overhead_ms: {
      label: "p50 latency overhead of (a) the gateway over (b) the direct tunnel, one request at a time (ms)",
      target: "<= 1",
      measured: overhead,
      met: overhead === null ? null : overhead <= 1,
      at: `concurrency ${first ?? "n/a"}`,
      floor: floorOverhead,
    },
    rps_over_tunnel_per_request: {
      label: "requests/s of (a) the gateway over (c) a new tunnel per request, lowest of the levels",
      target: ">= 5",
      measured: worst,
      met: worst === null ? null : worst >= 5,
      at: `concurrency ${levels.join(", ")}`,
    },
  };
}

const DEFINITIONS =
  "requests: a GET of /api/v1/namespaces/default (a ~250 B Namespace) from the bench to a stand-in managed apiserver, " +
  "closed loop with `concurrency` requests in flight, windows of params.windowMs per path and level, the paths taking turns " +
  "(rotated each round), medians [min-max] over params.rounds rounds; rps: successful requests per second; p50_ms/p99_ms: " +
  "latency percentiles of one window; cpu_us_per_request: CPU time of each process per request. Paths: gateway = " +
  "https://<gateway>/bench/<path> with a hub bearer token (TokenReview and SubjectAccessReview by a stand-in hub, cached " +
  "by the gateway), relayed through proxy-server and agent to the agent's gateway endpoint and on to the apiserver " +
  "impersonated; tunnel = the SDK's reusable TunnelClient through the same proxy-server and agent, TLS to the apiserver " +
  "inside the tunnel on a keep-alive https.Agent; tunnelPerRequest = a new single-use tunnel (its own HTTP/2 session and " +
  "TLS to the hub), TLS to the apiserver, one request, close (the model of the Go addon before upstream cluster-proxy " +
  "#368); direct = a keep-alive https.Agent straight to the apiserver; endpoint = the agent's gateway endpoint " +
  "(gateway.cluster-proxy.invalid.<cluster>:443) through the reusable TunnelClient, mutual TLS with the gateway identity, " +
  "the headers the gateway would set (Cluster-Proxy-Target: kube, Impersonate-User), no gateway; aggregated = " +
  "https://<real hub kube-apiserver>/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/bench/proxy/<path> " +
  "with the same bearer token (a --token-auth-file user of that hub), authorized by its RBAC (the chart's door), proxied " +
  "by its aggregator with the front-proxy client certificate to the same gateway (see `aggregated`), then as (a); " +
  "cpu_us_per_request.hub = that kube-apiserver's CPU; aggregator_connections = its TCP connections to the gateway at " +
  "the end of each window; frontProxy = what that hub's aggregator sends, sent by the bench straight to the gateway: " +
  "HTTP/2 with the front-proxy client certificate, X-Remote-User/X-Remote-Group, no bearer token, the aggregated URL " +
  "(so aggregated - frontProxy is the hub's share, frontProxy - gateway the gateway's); hubVersion = GET /version " +
  "of that hub with the same token and keep-alive client (authentication, priority and fairness, authorization and " +
  "the other filters, a tiny answer: the least any request through it costs); gatewayFloor = the gateway's request " +
  "with bench/gateway-floor.ts in place of the gateway: plain Node.js (HTTP/1.1 over TLS in, one HTTP/2 session with " +
  "the gateway identity over one tunnel connection out, a fixed impersonation) and nothing else, the least a Node.js " +
  "gateway of this design costs. watches: `count` watches through one gateway " +
  "to `clusters` clusters in turn (one agent each: an agent's endpoint serves at most 2,048 connections), RSS at the end " +
  "of each window and CPU over it (agent: summed over the agents), with none open, open and idle, and with one event per watch every " +
  "eventPeriodMs. targets: rps_over_tunnel = rps(gateway) / rps(tunnel) at the highest concurrency; " +
  "agent_cpu_us_per_request = the agent's CPU per request of the gateway path there; p50_overhead_ms and " +
  "p50_overhead_ms_h2 = p50(gateway) - p50(tunnel) at the lowest concurrency (<= 1 ms before the HTTP/2 hop, <= 0.7 ms " +
  "for it); rss_per_idle_watch_kib = (gateway + agent RSS with the watches open and idle - with none) / count; " +
  "rps_over_tunnel_per_request = the lowest over the levels of rps(gateway) / rps(tunnelPerRequest); " +
  "aggregated_p50_overhead_ms = p50(aggregated) - p50(gateway) at the lowest concurrency (issue 40); floor = the " +
  "same measure with gatewayFloor in place of gateway.";

/** gateway.json from a run. */
export function gatewayJson(run: GatewayRun): GatewayJson {
  const requests: GatewayJson["requests"] = {};
  const ratios: GatewayJson["ratios"] = {};
  const levels = [...new Set(run.windows.map((w) => w.concurrency))].sort((a, b) => a - b);
  for (const c of levels) {
    const byPath = {} as Record<GatewayPath, PathSummary>;
    for (const p of PATH_KEYS)
      byPath[p] = summarizePath(run.windows.filter((w) => w.concurrency === c && w.path === p));
    requests[String(c)] = byPath;
    ratios[String(c)] = ratiosOf(byPath);
  }
  return {
    runtime: run.runtime,
    machine: run.machine,
    run: { quick: run.quick, params: run.params, definitions: DEFINITIONS },
    requests,
    ratios,
    watches: run.watches,
    targets: targets(requests, ratios, run.watches),
    notes: run.notes,
    aggregated: run.aggregated,
    hub: run.hub,
    apiserver: run.apiserver,
    windows: run.windows,
  };
}

const fmt = (x: number | null | undefined, digits = 3): string =>
  x === null || x === undefined || !Number.isFinite(x) ? "n/a" : Number(x.toPrecision(digits)).toString();
const cell = (s: Stat | null): string => (s ? `${fmt(s.median)} [${fmt(s.min)}-${fmt(s.max)}]` : "n/a");
const ratio = (x: number | null | undefined): string => (x === null || x === undefined ? "n/a" : `${x.toFixed(2)}x`);

/** The printed table: every path at every level, the ratios, the watches and the targets. */
export function gatewayTable(j: GatewayJson): string {
  const out: string[] = [];
  out.push(
    "| concurrency | path | requests/s | p50 ms ↓ | p99 ms ↓ | rps vs (b) | p50 vs (b) | gateway CPU µs/req | tunnel dials/req | errors |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  );
  for (const [c, byPath] of Object.entries(j.requests)) {
    const base = byPath.tunnel;
    for (const p of PATH_KEYS) {
      const s = byPath[p];
      if (s.rps === null && s.p50_ms === null) continue;
      const vs = (a: Stat | null, b: Stat | null): string => ratio(a && b && b.median > 0 ? a.median / b.median : null);
      out.push(
        `| ${c} | ${GATEWAY_PATHS[p]} | ${cell(s.rps)} | ${cell(s.p50_ms)} | ${cell(s.p99_ms)} | ${vs(s.rps, base.rps)} | ` +
          `${vs(s.p50_ms, base.p50_ms)} | ${fmt(s.cpu_us_per_request.gateway ?? null)} | ${fmt(s.tunnel_dials_per_request)} | ${s.errors}${s.last_error ? ` (${s.last_error.slice(0, 60)})` : ""} |`,
      );
    }
  }
  const w = j.watches;
  if (w) {
    out.push(
      "",
      `| ${w.count} watches through one gateway (${w.clusters} clusters) | watches | gateway RSS MiB | gateway CPU % | server RSS MiB | server CPU % | agent RSS MiB | agent CPU % | events/s received |`,
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    );
    for (const [name, s] of [
      ["none open", w.none],
      ["open, idle", w.idle],
      [`events (one per watch every ${w.eventPeriodMs} ms)`, w.flowing],
    ] as const) {
      out.push(
        `| ${name} | ${s.watches} | ${fmt(s.gatewayRssMiB)} | ${fmt(s.gatewayCpuPercent)} | ${fmt(s.serverRssMiB)} | ` +
          `${fmt(s.serverCpuPercent)} | ${fmt(s.agentRssMiB)} | ${fmt(s.agentCpuPercent)} | ${fmt(s.eventsPerSecond)} |`,
      );
    }
  }
  out.push(
    "",
    "| target | target | measured | | where | (i) the floor of a Node.js gateway |",
    "| --- | --- | --- | --- | --- | --- |",
  );
  for (const t of Object.values(j.targets)) {
    const met = t.met === null ? "n/a" : t.met ? "met" : "NOT met";
    out.push(`| ${t.label} | ${t.target} | ${fmt(t.measured)} | ${met} | ${t.at} | ${fmt(t.floor ?? null)} |`);
  }
  return `${out.join("\n")}\n`;
}

/** Write `dir`/gateway.json and print the table. */
export function writeGatewayReport(run: GatewayRun, dir: string): GatewayJson {
  const j = gatewayJson(run);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "gateway.json"), `${JSON.stringify(j, null, 1)}\n`);
  const m = run.machine;
  process.stdout.write(
    `\n${run.quick ? "--quick run" : "full run"}; ${String(m["cpus"])} cores ${String(m["cpu_model"])}, ` +
      `Node ${run.runtime.node} (image ${run.runtime.image})\nmedian [min-max] over rounds; ↓ = lower is better\n\n` +
      `${gatewayTable(j)}\n${run.notes.map((n) => `- ${n}\n`).join("")}\nwrote ${join(dir, "gateway.json")}\n`,
  );
  return j;
}
