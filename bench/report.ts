/**
 * Turns the raw samples of a run into: results/latest.json (the stable machine-readable keys),
 * results/latest-detail.json (every sample), results/latest-table.md and the printed table
 * (medians [min-max], ours/direct, ours/Go), and results/chart.svg.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  FIRST_BYTE,
  FLOOR_VARIANTS,
  PATHS,
  percentileOf,
  summarize,
  type AgentScaleResult,
  type BulkResult,
  type DialRateResult,
  type IdleConnResult,
  type ManyResult,
  type PathName,
  type ReconnectStorm,
  type RttResult,
  type Summary,
} from "./lib.js";
import type { Runtime } from "./run-info.js";
import type { ShapedResult } from "./shaped.js";

type PerPath<T> = Record<PathName, T>;

export interface Detail {
  quick: boolean;
  params: Record<string, unknown>;
  machine: Record<string, unknown>;
  /** Older details have none (they ran on machine.node). */
  runtime?: Runtime;
  notes: string[];
  loopback: ShapedResult | null;
  shaped: ShapedResult | null;
  shapedLink: string;
  many: Record<string, PerPath<ManyResult[]>>;
  rtt: PerPath<RttResult[]> | null;
  firstByte: Record<string, number[]>;
  dialRate: PerPath<DialRateResult> | null;
  /** Dial rate of our SDK's reusable client through bench/relay-floor.ts (older details have none). */
  dialRateFloor?: DialRateResult;
  agents: Partial<Record<"ours" | "go", AgentScaleResult[]>>;
  idleConns: Partial<Record<"ours" | "go", IdleConnResult[]>>;
  /**
   * Idle agent RSS; bareNode: a `node -e` process that only waits (the runtime's own floor);
   * nodeTunnelFloor: plain node holding one mutual-TLS HTTP/2 session (any Node.js agent's floor).
   */
  idleAgentRssMiB: Partial<Record<"ours" | "go" | "bareNode" | "nodeTunnelFloor", number>>;
  /** The 10,000-agent scenario, per server (older details have none). */
  agents10k?: Partial<Record<"ours" | "go", BigFleetResult>>;
  profile: string;
}

/** One server with runs' load agents connected, and first-byte latency before and during. */
export interface BigFleetResult extends AgentScaleResult {
  /** Reusable client, new connection to first echoed byte (ms), before the agents connected. */
  firstByteBeforeMs: number[];
  /** The same while every agent is connected. */
  firstByteMs: number[];
  /** The same, one dial every 200 ms, while the agents connected (the storm; older details have none). */
  firstByteStormMs?: number[];
  /** Client dials through the real agent that failed while the agents connected. */
  stormDialFailures?: number;
  /**
   * Then every agent dropped its connection and reconnected at once (ours resuming their TLS
   * sessions, Go's full handshakes), with the client's dials meanwhile (older details have none).
   */
  reconnect?: ReconnectStorm & { dialFailures: number; firstByteMs: number[] };
}

/**
 * The targets of issue 41: ratios ours/Go (lower is better unless `atLeast`), or with `absolute`
 * ours itself (the idle agent's RSS in MiB). Each first-byte ratio but the reusable client's is
 * against the Go implementation end to end: the Go konnectivity-client through the Go server.
 * Read from the medians of latest.json and printed with the table, so every run says whether they are met.
 */
const TARGETS: { key: string; label: string; limit: number; atLeast?: boolean; absolute?: boolean }[] = [
  { key: "dials_per_s", label: "dial rate", limit: 1.3, atLeast: true },
  { key: "first_byte_sdk_ms", label: "first byte of a new connection through our SDK (resumed)", limit: 0.8 },
  { key: "first_byte_go_client_ms", label: "first byte of the Go client against our server", limit: 1.0 },
  { key: "first_byte_reusable_ms", label: "first byte, reusable client", limit: 1.0 },
  { key: "agents_10k_connect_s", label: "10,000 agents: time for all to connect (full handshakes)", limit: 1.0 },
  {
    key: "agents_10k_reconnect_s",
    label: "10,000 agents: time for all to reconnect at once (ours resuming, Go's full handshakes)",
    limit: 0.7,
  },
  { key: "server_kib_per_agent_burst", label: "server memory per agent right after a 1,000-agent burst", limit: 1.0 },
  { key: "agent_rss_mib", label: "idle agent RSS, MiB", limit: 60, absolute: true },
];

/** The key of a target in `targets` (an absolute one gets its own). */
const targetKey = (t: (typeof TARGETS)[number]): string => (t.absolute ? `${t.key}_absolute` : t.key);

type Row = {
  label: string;
  lowerBetter: boolean;
  values: Partial<Record<PathName, Summary | null>>;
};

const KiB = 1024;

/** A single result per path as the one-sample list perPath expects. */
function wrap<T>(x: Partial<Record<"ours" | "go", T>>): Partial<Record<PathName, T[]>> {
  const out: Partial<Record<PathName, T[]>> = {};
  if (x.ours) out.ours = [x.ours];
  if (x.go) out.go = [x.go];
  return out;
}

function perPath<T>(
  src: Partial<Record<PathName, T[]>> | null | undefined,
  f: (x: T) => number,
): Partial<Record<PathName, Summary | null>> {
  const out: Partial<Record<PathName, Summary | null>> = {};
  if (!src) return out;
  for (const p of PATHS) {
    const v = src[p];
    if (v && v.length) out[p] = summarize(v.map(f));
  }
  return out;
}

/** One connection: per run, the mean of download and upload. */
function bothWays(r: ShapedResult | null): Partial<Record<PathName, Summary | null>> {
  if (!r) return {};
  const out: Partial<Record<PathName, Summary | null>> = {};
  for (const p of PATHS) {
    const d = r.download[p];
    const u = r.upload[p];
    out[p] = summarize(d.map((x, i) => (x.mbps + (u[i]?.mbps ?? x.mbps)) / 2));
  }
  return out;
}

const tunnelCpu = (b: BulkResult): number => b.cpuPerGB.server + b.cpuPerGB.agent;

function fmt(x: number): string {
  const a = Math.abs(x);
  if (a >= 1000) return x.toFixed(0);
  if (a >= 100) return x.toFixed(0);
  if (a >= 10) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  return x.toFixed(3);
}

function cell(s: Summary | null | undefined): string {
  if (!s) return "n/a";
  if (s.n === 1 || s.min === s.max) return fmt(s.median);
  return `${fmt(s.median)} [${fmt(s.min)}-${fmt(s.max)}]`;
}

function ratio(a: Summary | null | undefined, b: Summary | null | undefined): string {
  if (!a || !b || b.median === 0) return "n/a";
  return `${(a.median / b.median).toFixed(2)}x`;
}

function rows(d: Detail): Row[] {
  const r: Row[] = [];
  const add = (label: string, lowerBetter: boolean, values: Row["values"]): void => {
    if (Object.values(values).some((v) => v)) r.push({ label, lowerBetter, values });
  };
  for (const [name, res] of [
    ["loopback", d.loopback],
    ["shaped 1 Gbit/s link", d.shaped],
  ] as const) {
    if (!res) continue;
    add(
      `${name}: download, 1 conn (Mbit/s)`,
      false,
      perPath(res.download, (b) => b.mbps),
    );
    add(
      `${name}: upload, 1 conn (Mbit/s)`,
      false,
      perPath(res.upload, (b) => b.mbps),
    );
    if (name === "loopback") {
      add(`${name}: tunnel CPU s/GB (server+agent), download`, true, perPath(res.download, tunnelCpu));
      add(`${name}: tunnel CPU s/GB (server+agent), upload`, true, perPath(res.upload, tunnelCpu));
      add(
        `${name}: server CPU s/GB, download`,
        true,
        perPath(res.download, (b) => b.cpuPerGB.server),
      );
      add(
        `${name}: agent CPU s/GB, download`,
        true,
        perPath(res.download, (b) => b.cpuPerGB.agent),
      );
      add(
        `${name}: client CPU s/GB, download`,
        true,
        perPath(res.download, (b) => b.cpuPerGB.client),
      );
    }
  }
  for (const [n, res] of Object.entries(d.many)) {
    add(
      `${n} concurrent downloads (Mbit/s total)`,
      false,
      perPath(res, (m) => m.mbps),
    );
    add(
      `${n} concurrent: fairness (slowest / mean)`,
      false,
      perPath(res, (m) => m.fairness),
    );
  }
  if (d.rtt) {
    add(
      "64 B round trip p50 (µs)",
      true,
      perPath(d.rtt, (x) => x.p50),
    );
    add(
      "64 B round trip p99 (µs)",
      true,
      perPath(d.rtt, (x) => x.p99),
    );
    add(
      "64 B round trip p99.9 (µs)",
      true,
      perPath(d.rtt, (x) => x.p999),
    );
  }
  const fb = (k: string): Summary | null => summarize(d.firstByte[k] ?? []);
  if (Object.keys(d.firstByte).length) {
    add("new conn to first byte, single-use gRPC tunnel (ms)", true, {
      direct: fb("direct TCP"),
      ours: fb(FIRST_BYTE.oursSingleUse),
      go: fb("go single-use gRPC tunnel"),
    });
    if (d.firstByte[FIRST_BYTE.goClientGo]) {
      add("new conn to first byte, our SDK's single-use dial (resumed) against the Go client and server (ms)", true, {
        direct: fb("direct TCP"),
        ours: fb(FIRST_BYTE.oursSingleUse),
        go: fb(FIRST_BYTE.goClientGo),
      });
      add("new conn to first byte, the Go konnectivity-client against each server (ms)", true, {
        direct: fb("direct TCP"),
        ours: fb(FIRST_BYTE.goClientOurs),
        go: fb(FIRST_BYTE.goClientGo),
      });
    }
    add("new conn to first byte, reusable client (ms)", true, {
      direct: fb("direct TCP"),
      ours: fb("ours reusable client"),
      go: fb("go reusable client (our SDK)"),
    });
    add("new conn to first byte, HTTP CONNECT (ms)", true, {
      direct: fb("direct TCP"),
      ours: fb("ours HTTP CONNECT (mTLS)"),
    });
    if (d.firstByte[FLOOR_VARIANTS.singleUse]) {
      add("node floor: single-use, our design in plain node, nothing else (bench/relay-floor.ts) (ms)", true, {
        direct: fb("direct TCP"),
        ours: fb(FLOOR_VARIANTS.singleUse),
        go: fb("go single-use gRPC tunnel"),
      });
      add("node floor: reusable client, our design in plain node, nothing else (ms)", true, {
        direct: fb("direct TCP"),
        ours: fb(FLOOR_VARIANTS.reusable),
        go: fb("go reusable client (our SDK)"),
      });
    }
    if (d.firstByte[FIRST_BYTE.goClientFloor]) {
      add("node floor: the Go konnectivity-client against the node floor (bench/relay-floor.ts) (ms)", true, {
        direct: fb("direct TCP"),
        ours: fb(FIRST_BYTE.goClientFloor),
        go: fb(FIRST_BYTE.goClientGo),
      });
    }
    if (d.firstByte[FIRST_BYTE.clientFloorFloor]) {
      add(
        "client floor: a plain node client single-use, resuming, through ours / the node floor (bench/client-floor.ts) (ms)",
        true,
        {
          direct: fb("direct TCP"),
          ours: fb(FIRST_BYTE.clientFloorOurs),
          go: fb(FIRST_BYTE.clientFloorFloor),
        },
      );
    }
  }
  if (d.dialRate) {
    const dr: Partial<Record<PathName, Summary | null>> = {};
    for (const p of PATHS) if (d.dialRate[p]) dr[p] = summarize(d.dialRate[p].windows);
    add("dials/s (dial, 16 B echo, close; 16 in parallel)", false, dr);
    if (d.dialRateFloor) {
      add("node floor: dials/s, our design in plain node, nothing else", false, {
        ours: summarize(d.dialRateFloor.windows),
        go: dr.go,
      });
    }
  }
  const agentsN = d.agents.ours?.[0]?.agents ?? d.agents.go?.[0]?.agents;
  if (agentsN !== undefined) {
    add(
      `server RSS with ${agentsN} idle agents (MiB)`,
      true,
      perPath(d.agents, (a) => a.rssMiB),
    );
    add(
      "server memory per idle agent (KiB)",
      true,
      perPath(d.agents, (a) => a.bytesPerAgent / KiB),
    );
    const settled = d.agents.ours?.[0]?.settledAfterS;
    if (settled !== undefined) {
      add(
        `server memory per idle agent after ${settled} s idle (KiB)`,
        true,
        perPath(d.agents, (a) => (a.settledBytesPerAgent ?? NaN) / KiB),
      );
    }
    if (d.agents.ours?.[0]?.marginalBytesPerAgent !== undefined) {
      add(
        "server memory per idle agent, second half only (KiB)",
        true,
        perPath(d.agents, (a) => (a.marginalBytesPerAgent ?? NaN) / KiB),
      );
    }
    add(
      `server idle CPU with ${agentsN} agents (% of a core)`,
      true,
      perPath(d.agents, (a) => a.idleCpuPercent),
    );
  }
  const connsN = d.idleConns.ours?.[0]?.conns ?? d.idleConns.go?.[0]?.conns;
  if (connsN !== undefined) {
    add(
      `idle conn memory, server (KiB/conn, ${connsN} conns)`,
      true,
      perPath(d.idleConns, (c) => c.serverBytesPerConn / KiB),
    );
    add(
      `idle conn memory, agent (KiB/conn, ${connsN} conns)`,
      true,
      perPath(d.idleConns, (c) => c.agentBytesPerConn / KiB),
    );
  }
  if (d.idleAgentRssMiB.ours !== undefined) {
    add("idle agent process RSS (MiB)", true, {
      ours: summarize([d.idleAgentRssMiB.ours]),
      go: summarize([d.idleAgentRssMiB.go ?? NaN]),
    });
  }
  if (d.idleAgentRssMiB.bareNode !== undefined) {
    add("bare `node` process RSS, for reference (MiB)", true, { ours: summarize([d.idleAgentRssMiB.bareNode]) });
  }
  if (d.idleAgentRssMiB.nodeTunnelFloor !== undefined) {
    add("plain `node` holding one mTLS HTTP/2 session, for reference (MiB)", true, {
      ours: summarize([d.idleAgentRssMiB.nodeTunnelFloor]),
    });
  }
  if (d.agents.ours?.[0]?.peakBytesPerAgent !== undefined) {
    add(
      "server memory per agent, peak during the connect burst (KiB)",
      true,
      perPath(d.agents, (a) => (a.peakBytesPerAgent ?? NaN) / KiB),
    );
  }
  const big = d.agents10k ?? {};
  const bigN = big.ours?.agents ?? big.go?.agents;
  if (bigN !== undefined) {
    const each = (f: (b: BigFleetResult) => number): Row["values"] => perPath(wrap(big), f);
    add(
      `${bigN} agents: time for all to connect (s)`,
      true,
      each((b) => b.connectSeconds),
    );
    if (big.ours?.reconnect || big.go?.reconnect)
      add(
        `${bigN} agents: time for all to reconnect at once, ours resuming (s)`,
        true,
        each((b) => b.reconnect?.seconds ?? NaN),
      );
    add(
      `${bigN} agents: server RSS (MiB)`,
      true,
      each((b) => b.rssMiB),
    );
    add(
      `${bigN} agents: server memory per agent (KiB)`,
      true,
      each((b) => b.bytesPerAgent / KiB),
    );
    if (big.ours?.serverCpuMsPerAgent !== undefined) {
      add(
        `${bigN} agents: server CPU per agent while they connected (ms)`,
        true,
        each((b) => b.serverCpuMsPerAgent ?? NaN),
      );
    }
    add(
      `${bigN} agents: server memory per agent, peak while connecting (KiB)`,
      true,
      each((b) => (b.peakBytesPerAgent ?? NaN) / KiB),
    );
    add(
      `${bigN} agents: first byte p50, reusable client, while connected (ms)`,
      true,
      each((b) => percentileOf(b.firstByteMs, 50)),
    );
    add(
      `${bigN} agents: first byte p99, reusable client, while connected (ms)`,
      true,
      each((b) => percentileOf(b.firstByteMs, 99)),
    );
    add(
      `${bigN} agents: first byte p50, reusable client, before they connected (ms)`,
      true,
      each((b) => percentileOf(b.firstByteBeforeMs, 50)),
    );
    if (big.ours?.firstByteStormMs !== undefined) {
      add(
        `${bigN} agents: first byte p50, reusable client, while they connected (ms)`,
        true,
        each((b) => percentileOf(b.firstByteStormMs ?? [], 50)),
      );
      add(
        `${bigN} agents: client dials through the real agent that failed while they connected`,
        true,
        each((b) => b.stormDialFailures ?? NaN),
      );
    }
  }
  return r;
}

/** The stable keys other tools read. */
function latest(d: Detail): { json: Record<string, unknown>; summaries: Record<string, Row["values"]> } {
  const s: Record<string, Row["values"]> = {
    loopback_throughput_mbps: bothWays(d.loopback),
    shaped_throughput_mbps: bothWays(d.shaped),
    many_conn_throughput_mbps: perPath(d.many["64"] ?? null, (m) => m.mbps),
    rtt_p50_us: perPath(d.rtt, (x) => x.p50),
    rtt_p99_us: perPath(d.rtt, (x) => x.p99),
    first_byte_ms: {
      direct: summarize(d.firstByte["direct TCP"] ?? []),
      ours: summarize(d.firstByte[FIRST_BYTE.oursSingleUse] ?? []),
      go: summarize(d.firstByte["go single-use gRPC tunnel"] ?? []),
    },
    dials_per_s: {},
    server_rss_mib_1000_agents: perPath(d.agents, (a) => a.rssMiB),
    bytes_per_idle_connection: perPath(d.idleConns, (c) => c.serverBytesPerConn + c.agentBytesPerConn),
    first_byte_sdk_ms: {
      direct: summarize(d.firstByte["direct TCP"] ?? []),
      ours: summarize(d.firstByte[FIRST_BYTE.oursSingleUse] ?? []),
      go: summarize(d.firstByte[FIRST_BYTE.goClientGo] ?? []),
    },
    first_byte_go_client_ms: {
      direct: summarize(d.firstByte["direct TCP"] ?? []),
      ours: summarize(d.firstByte[FIRST_BYTE.goClientOurs] ?? []),
      go: summarize(d.firstByte[FIRST_BYTE.goClientGo] ?? []),
    },
    first_byte_reusable_ms: {
      direct: summarize(d.firstByte["direct TCP"] ?? []),
      ours: summarize(d.firstByte["ours reusable client"] ?? []),
      go: summarize(d.firstByte["go reusable client (our SDK)"] ?? []),
    },
    agent_rss_mib: {
      ours: summarize([d.idleAgentRssMiB.ours ?? NaN]),
      go: summarize([d.idleAgentRssMiB.go ?? NaN]),
    },
    server_kib_per_agent_burst: perPath(d.agents, (a) => a.bytesPerAgent / KiB),
    agents_10k: perPath(wrap(d.agents10k ?? {}), (b) => b.bytesPerAgent / KiB),
  };
  if (d.dialRate) for (const p of PATHS) s["dials_per_s"]![p] = summarize(d.dialRate[p]?.windows ?? []);
  const json: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s)) {
    const o: Record<string, number> = {};
    for (const p of PATHS) {
      const x = v[p];
      if (x) o[p] = Math.round(x.median * 100) / 100;
    }
    json[k] = o;
  }
  const r2 = (x: number | undefined): number | null =>
    x === undefined || !Number.isFinite(x) ? null : Math.round(x * 100) / 100;
  const rss = json["agent_rss_mib"] as Record<string, number | null>;
  rss["bare_node"] = r2(d.idleAgentRssMiB.bareNode);
  rss["node_tunnel_floor"] = r2(d.idleAgentRssMiB.nodeTunnelFloor);
  // The node floors (bench/relay-floor.ts: our design in plain node, nothing else): what no Node.js implementation can beat.
  const floorOf = (xs: number[] | undefined): number | null => r2(summarize(xs ?? [])?.median);
  (json["first_byte_ms"] as Record<string, number | null>)["node_floor"] = floorOf(
    d.firstByte[FLOOR_VARIANTS.singleUse],
  );
  // The SDK's resumed first byte against the Node.js floor of client, server and agent together.
  (json["first_byte_sdk_ms"] as Record<string, number | null>)["node_floor"] = floorOf(
    d.firstByte[FIRST_BYTE.clientFloorFloor],
  );
  (json["first_byte_go_client_ms"] as Record<string, number | null>)["node_floor"] = floorOf(
    d.firstByte[FIRST_BYTE.goClientFloor],
  );
  (json["first_byte_reusable_ms"] as Record<string, number | null>)["node_floor"] = floorOf(
    d.firstByte[FLOOR_VARIANTS.reusable],
  );
  (json["dials_per_s"] as Record<string, number | null>)["node_floor"] = floorOf(d.dialRateFloor?.windows);
  const burst = json["server_kib_per_agent_burst"] as Record<string, number | null>;
  for (const p of ["ours", "go"] as const) burst[`${p}_peak`] = r2((d.agents[p]?.[0]?.peakBytesPerAgent ?? NaN) / KiB);
  const big: Record<string, unknown> = {};
  for (const p of ["ours", "go"] as const) {
    const b = d.agents10k?.[p];
    if (!b) continue;
    big[p] = {
      agents: b.agents,
      connect_s: r2(b.connectSeconds),
      server_rss_mib: r2(b.rssMiB),
      kib_per_agent: r2(b.bytesPerAgent / KiB),
      kib_per_agent_peak: r2((b.peakBytesPerAgent ?? NaN) / KiB),
      server_cpu_ms_per_agent: r2(b.serverCpuMsPerAgent),
      load_agent_cpu_ms_per_agent: r2(b.loadAgentCpuMsPerAgent),
      first_byte_p50_ms: r2(percentileOf(b.firstByteMs, 50)),
      first_byte_p99_ms: r2(percentileOf(b.firstByteMs, 99)),
      first_byte_p50_ms_before: r2(percentileOf(b.firstByteBeforeMs, 50)),
      first_byte_p50_ms_storm: r2(percentileOf(b.firstByteStormMs ?? [], 50)),
      storm_dials: b.firstByteStormMs?.length ?? null,
      storm_dial_failures: b.stormDialFailures ?? null,
      reconnect_s: r2(b.reconnect?.seconds),
      reconnect_resumed: b.reconnect?.resumed ?? null,
      reconnect_server_cpu_ms_per_agent: r2(b.reconnect?.serverCpuMsPerAgent),
      reconnect_dials: b.reconnect?.firstByteMs.length ?? null,
      reconnect_dial_failures: b.reconnect?.dialFailures ?? null,
    };
  }
  json["agents_10k"] = big;
  json["agents_10k_connect_s"] = {
    ours: r2(d.agents10k?.ours?.connectSeconds),
    go: r2(d.agents10k?.go?.connectSeconds),
  };
  json["agents_10k_reconnect_s"] = {
    ours: r2(d.agents10k?.ours?.reconnect?.seconds),
    go: r2(d.agents10k?.go?.reconnect?.seconds),
  };
  json["targets"] = targets(json);
  json["runs"] = {
    repeats: d.params["runs"],
    quick: d.quick,
    agents: d.agents.ours?.[0]?.agents ?? d.agents.go?.[0]?.agents ?? null,
    idle_connections: d.idleConns.ours?.[0]?.conns ?? d.idleConns.go?.[0]?.conns ?? null,
    bulk_bytes: d.params["bulkBytes"],
    shaped_bytes: d.params["shapedBytes"],
    dial_rate_seconds: ((d.params["dialWindows"] as number) * (d.params["dialWindowMs"] as number)) / 1000,
    definitions:
      "throughput: Mbit/s (1e6 bit/s), one connection, mean of download and upload per run, median of runs; " +
      "many_conn: 64 concurrent downloads; rtt: 64 B echo on an open connection; first_byte: new connection " +
      "(ours/go: our SDK's single-use dial, a new HTTP/2 session per connection, which resumes its TLS session with either server) to first echoed byte; " +
      "first_byte_sdk_ms: that dial through ours against the real Go konnectivity-client through the Go server (full handshakes; node_floor: " +
      "bench/client-floor.ts, a plain node client resuming its TLS session, through bench/relay-floor.ts); " +
      "first_byte_go_client_ms: the Go konnectivity-client through each server (node_floor in first_byte_ms, first_byte_go_client_ms, first_byte_reusable_ms and dials_per_s: the same against " +
      "bench/relay-floor.ts, a plain node server and agent that relay as ours do with no flow control, metrics or limits: the floor of any Node.js implementation of this design); dials_per_s: dial + 16 B echo " +
      "+ close, 16 in parallel, median of windows; server_rss_mib_1000_agents: server RSS with runs.agents idle " +
      "agents; bytes_per_idle_connection: server + agent RSS growth per idle tunnelled connection; " +
      "first_byte_reusable_ms: the same as first_byte through one long-lived client (ours: our SDK's TunnelClient " +
      "against each server); agent_rss_mib: idle agent RSS (bare_node: a node process doing nothing; node_tunnel_floor: plain node holding one mutual-TLS HTTP/2 session to the agent port); " +
      "server_kib_per_agent_burst: server RSS growth per agent, 13 s after runs.agents agents connected at once " +
      "(*_peak: the highest RSS sampled while they connected); agents_10k: 10,000 load agents on one server next " +
      "to one real agent (kib_per_agent, connect_s for all of them, first byte of new connections through the " +
      "real agent with a reusable client while they are connected, and before; *_storm: one such dial every 200 ms while they connected, storm_dial_failures: those that failed); targets: issue 41's ratios ours/Go " +
      "(node_floor_ratio: the node floor's ratio to Go; reachable_in_node: whether the floor itself meets the target; " +
      "agent_rss_mib_absolute: the target in MiB, its ratio and node_floor_ratio are MiB); agents_10k_connect_s: " +
      "agents_10k's connect_s of each server, for the target; agents_10k.*.server_cpu_ms_per_agent: the server's CPU while they connected; " +
      "agents_10k.*.reconnect_*: then all of them dropped their connections and reconnected at once (ours resuming their TLS " +
      "sessions, Go's agents keeping no session cache), with a client's dials meanwhile; agents_10k_reconnect_s: reconnect_s of each server, for the target",
  };
  json["runtime"] = d.runtime ?? { node: d.machine["node"] };
  json["machine"] = d.machine;
  return { json, summaries: s };
}

function targets(json: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const t of TARGETS) {
    const v = json[t.key] as Record<string, number | null> | undefined;
    const ours = v?.["ours"];
    const go = t.absolute ? 1 : v?.["go"];
    if (typeof ours !== "number" || typeof go !== "number" || go === 0) continue;
    const ratio = Math.round((ours / go) * 100) / 100;
    const met = (r: number): boolean => (t.atLeast ? r >= t.limit : r <= t.limit);
    // The same ratio for the node floor (our design in plain node doing nothing else):
    // a target the floor misses is out of reach of any Node.js implementation.
    const floor = v?.["node_floor"] ?? v?.["node_tunnel_floor"];
    const floorRatio = typeof floor === "number" ? Math.round((floor / go) * 100) / 100 : null;
    out[targetKey(t)] = {
      ratio,
      target: `${t.atLeast ? ">=" : "<="} ${t.limit}`,
      met: met(ratio),
      node_floor_ratio: floorRatio,
      reachable_in_node: floorRatio === null ? null : met(floorRatio),
    };
  }
  return out;
}

function targetTable(json: Record<string, unknown>): string {
  type Got = { ratio: number; target: string; met: boolean; node_floor_ratio: number | null };
  const got = json["targets"] as Record<string, Got>;
  const lines = TARGETS.filter((t) => got[targetKey(t)]).map((t) => {
    const g = got[targetKey(t)]!;
    const unit = t.absolute ? "" : "x";
    const floor = g.node_floor_ratio === null ? "n/a" : `${g.node_floor_ratio.toFixed(2)}${unit}`;
    return `| ${t.label} (\`${t.key}\`) | ${g.target} | ${g.ratio.toFixed(2)}${unit} | ${g.met ? "met" : "NOT met"} | ${floor} |`;
  });
  if (lines.length === 0) return "";
  return (
    "| Target (ours/Go; MiB: ours) | target | measured | | node floor |\n| --- | --- | --- | --- | --- |\n" +
    `${lines.join("\n")}\n`
  );
}

function table(d: Detail): string {
  const head = "| Metric | direct | ours | Go | ours/direct | ours/Go |\n| --- | --- | --- | --- | --- | --- |";
  const body = rows(d).map(
    (r) =>
      `| ${r.label}${r.lowerBetter ? " ↓" : ""} | ${cell(r.values.direct)} | ${cell(r.values.ours)} | ${cell(r.values.go)} | ` +
      `${ratio(r.values.ours, r.values.direct)} | ${ratio(r.values.ours, r.values.go)} |`,
  );
  return `${head}\n${body.join("\n")}\n`;
}

// ---------------------------------------------------------------------------------------------
// Chart (hand-written SVG): one panel per latest.json key, a bar per path with a min-max whisker.

const COLORS: Record<PathName, string> = { direct: "#8c8c8c", ours: "#2b6cb0", go: "#dd8452" };
const TITLES: Record<string, string> = {
  loopback_throughput_mbps: "Loopback, 1 connection (Mbit/s) ↑",
  shaped_throughput_mbps: "Shaped 1 Gbit/s link (Mbit/s) ↑",
  many_conn_throughput_mbps: "64 connections (Mbit/s total) ↑",
  rtt_p50_us: "Round trip p50 (µs) ↓",
  rtt_p99_us: "Round trip p99 (µs) ↓",
  first_byte_ms: "New conn to first byte (ms) ↓",
  dials_per_s: "Dials per second ↑",
  server_rss_mib_1000_agents: "Server RSS, idle agents (MiB) ↓",
  bytes_per_idle_connection: "Bytes per idle connection ↓",
  first_byte_reusable_ms: "First byte, reusable client (ms) ↓",
  agent_rss_mib: "Idle agent RSS (MiB) ↓",
  server_kib_per_agent_burst: "Server KiB/agent after a burst ↓",
  agents_10k: "Server KiB/agent, 10,000 agents ↓",
};

const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function chart(summaries: Record<string, Row["values"]>, subtitle: string): string {
  const keys = Object.keys(TITLES);
  const cols = 3;
  const pw = 320;
  const ph = 130;
  const top = 60;
  const width = cols * pw + 20;
  const height = top + Math.ceil(keys.length / cols) * ph + 30;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="22" font-size="15" font-weight="bold">cluster-proxy vs direct TCP vs Go konnectivity (medians, whiskers: min-max)</text>`,
    `<text x="10" y="40" fill="#555">${esc(subtitle)}</text>`,
  );
  PATHS.forEach((p, i) => {
    out.push(`<rect x="${width - 230 + i * 75}" y="30" width="10" height="10" fill="${COLORS[p]}"/>`);
    out.push(`<text x="${width - 216 + i * 75}" y="39">${p === "go" ? "Go" : p}</text>`);
  });
  keys.forEach((k, idx) => {
    const x0 = 10 + (idx % cols) * pw;
    const y0 = top + Math.floor(idx / cols) * ph;
    out.push(`<text x="${x0}" y="${y0 + 12}" font-weight="bold">${esc(TITLES[k]!)}</text>`);
    const v = summaries[k] ?? {};
    // Scale to the tunnels (ours, Go); a direct bar far beyond them is drawn clipped, marked "»".
    const tunnelMax = Math.max(v.ours?.max ?? 0, v.go?.max ?? 0);
    const allMax = Math.max(...PATHS.map((p) => v[p]?.max ?? 0), 1e-9);
    const max = tunnelMax > 0 && allMax > tunnelMax * 2 ? tunnelMax * 1.25 : allMax;
    const barMax = pw - 120;
    const clip = (x: number): number => Math.min(x, max);
    PATHS.forEach((p, i) => {
      const y = y0 + 24 + i * 30;
      out.push(`<text x="${x0}" y="${y + 14}">${p === "go" ? "Go" : p}</text>`);
      const s = v[p];
      if (!s) {
        out.push(`<text x="${x0 + 50}" y="${y + 14}" fill="#999">n/a</text>`);
        return;
      }
      const w = (clip(s.median) / max) * barMax;
      out.push(`<rect x="${x0 + 50}" y="${y}" width="${w.toFixed(1)}" height="20" fill="${COLORS[p]}"/>`);
      if (s.median > max) out.push(`<text x="${(x0 + 50 + w - 14).toFixed(1)}" y="${y + 15}" fill="#fff">»</text>`);
      const a = x0 + 50 + (clip(s.min) / max) * barMax;
      const b = x0 + 50 + (clip(s.max) / max) * barMax;
      out.push(
        `<line x1="${a.toFixed(1)}" y1="${y + 10}" x2="${b.toFixed(1)}" y2="${y + 10}" stroke="#222" stroke-width="1"/>`,
      );
      out.push(`<line x1="${a.toFixed(1)}" y1="${y + 5}" x2="${a.toFixed(1)}" y2="${y + 15}" stroke="#222"/>`);
      out.push(`<line x1="${b.toFixed(1)}" y1="${y + 5}" x2="${b.toFixed(1)}" y2="${y + 15}" stroke="#222"/>`);
      const label = s.median > max ? `${fmt(s.median)} (off scale)` : fmt(s.median);
      out.push(`<text x="${(Math.max(b, x0 + 50 + w) + 5).toFixed(1)}" y="${y + 14}">${label}</text>`);
    });
  });
  out.push(`</svg>`);
  return `${out.join("\n")}\n`;
}

export function report(d: Detail, dir: string): void {
  mkdirSync(dir, { recursive: true });
  const { json, summaries } = latest(d);
  writeFileSync(join(dir, "latest.json"), `${JSON.stringify(json, null, 2)}\n`);
  writeFileSync(join(dir, "latest-detail.json"), `${JSON.stringify(d, null, 1)}\n`);
  const m = d.machine;
  const subtitle =
    `${d.quick ? "--quick run" : "full run"}, ${String(d.params["runs"])} runs; ${String(m["cpus"])} cores ` +
    `${String(m["cpu_model"])}, Node ${String(m["node"])}, ${String(m["date"]).slice(0, 10)}`;
  writeFileSync(join(dir, "chart.svg"), chart(summaries, subtitle));
  const t = table(d) + (targetTable(json) ? `\n${targetTable(json)}` : "");
  const notes = d.notes.map((n) => `- ${n}`).join("\n");
  const tableMd = `${subtitle}\n\n${t}${notes ? `\n${notes}\n` : ""}`;
  writeFileSync(join(dir, "latest-table.md"), tableMd);
  process.stdout.write(`\n${subtitle}\nmedian [min-max] over runs; ↓ = lower is better\n\n${t}\n`);
  if (notes) process.stdout.write(`${notes}\n`);
  if (d.profile) process.stdout.write(`\n${d.profile}`);
  process.stdout.write(`\nwrote ${join(dir, "latest.json")}, latest-detail.json, latest-table.md, chart.svg\n`);
}
