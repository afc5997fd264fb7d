/**
 * Scenario 2, run INSIDE the hub network namespace (bench.ts starts it with `ip netns exec`).
 * The server and the client (this process) are in the hub namespace; the agent and the target
 * run in the cluster namespace (`ip netns exec <mc>`), so every tunnelled byte and every direct
 * byte crosses the shaped veth. Prints `RESULT <json>` on stdout and exits. Everything it starts
 * is killed by PID, also on SIGINT/SIGTERM.
 */
import { Harness } from "../test/framework/harness.js";
import {
  PATHS,
  bulk,
  opener,
  startGo,
  startOurs,
  startTarget,
  type BulkResult,
  type PathName,
  type Stack,
  type Topology,
} from "./lib.js";
import type { StandaloneCertPaths } from "@cluster-proxy/pki";

export interface ShapedConfig {
  certs: Omit<StandaloneCertPaths, "agents"> & { agents: [string, { cert: string; key: string }][] };
  mcNs: string;
  hubIp: string;
  mcIp: string;
  goBin: string;
  bytes: number;
  runs: number;
}

export type ShapedResult = Record<"download" | "upload", Record<PathName, BulkResult[]>>;

const cfg = JSON.parse(process.argv[2] ?? "{}") as ShapedConfig;
const h = new Harness();
h.certs = { ...cfg.certs, agents: new Map(cfg.certs.agents) };

let closing = false;
async function shutdown(code: number): Promise<never> {
  if (!closing) {
    closing = true;
    await h.close().catch(() => undefined);
  }
  process.exit(code);
}
process.on("SIGINT", () => void shutdown(130));
process.on("SIGTERM", () => void shutdown(143));

try {
  const topo: Topology = {
    clusterWrap: ["ip", "netns", "exec", cfg.mcNs],
    agentServerHost: cfg.hubIp,
    agentBind: cfg.hubIp,
    targetBind: "0.0.0.0",
    directHost: cfg.mcIp,
  };
  const target = await startTarget(h, topo);
  const stacks: Partial<Record<PathName, Stack>> = {
    ours: await startOurs(h, topo),
    go: await startGo(h, topo, cfg.goBin),
  };
  const result: ShapedResult = {
    download: { direct: [], ours: [], go: [] },
    upload: { direct: [], ours: [], go: [] },
  };
  for (let run = 0; run < cfg.runs; run++) {
    for (const path of PATHS) {
      const st = stacks[path];
      const open = opener(path, topo, st);
      const pids = { server: st?.server.child.pid, agent: st?.agent?.child.pid, target: target.proc.child.pid };
      for (const dir of ["download", "upload"] as const) {
        const r = await bulk(open, target.bulk, dir, cfg.bytes, pids);
        result[dir][path].push(r);
        process.stderr.write(`bench: shaped ${dir} ${path} run ${run + 1}: ${r.mbps.toFixed(0)} Mbit/s\n`);
      }
    }
  }
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
  await shutdown(0);
} catch (e) {
  process.stderr.write(`bench: shaped scenario failed: ${(e as Error).stack ?? String(e)}\n`);
  await shutdown(1);
}
