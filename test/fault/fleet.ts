/**
 * Many real proxy-agents in one process (the product's ProxyAgent class, each with its own mTLS
 * connection, Connect stream and reconnect loop), for the reconnect-storm fault. Each agent
 * serves the cluster `fleet-<i>` (`i` from `first`). Connect attempts are recorded from the agents' own log events:
 * `connecting to proxy server` (an attempt starts), `connected to proxy server`, and each failed
 * attempt with its reason (`cannot connect to proxy server`, or the server shedding load).
 *
 *   node --conditions=source --import tsx test/fault/fleet.ts '<json FleetConfig>'
 *
 * stdin commands, one per line, each answered by one JSON line on stdout:
 *   `status` -> {"connected": <agents holding a server connection>, "agents": <n>}
 *   `attempts <since epoch ms>` -> {"started": [ms...], "connected": [ms...], "failed": [{at, reason}...]}
 *     recorded since then
 */
import { createInterface } from "node:readline";
import { agentOptionsSchema, resolveOptions } from "@cluster-proxy/api";
import { ProxyAgent } from "@cluster-proxy/agent";
import { silentLogger, type Logger } from "@cluster-proxy/kit";

export interface FleetConfig {
  count: number;
  host: string;
  port: number;
  ca: string;
  cert: string;
  key: string;
  /** How many agents start at once (the first connects; later reconnects are the agents' own). */
  startConcurrency: number;
  /** The index of this process's first agent (several fleet processes serve distinct clusters). */
  first?: number;
}

const cfg = JSON.parse(process.argv[2] ?? "{}") as FleetConfig;
const started: number[] = [];
const connected: number[] = [];
const failed: { at: number; reason: string }[] = [];

/** A logger that records connect attempts and drops everything else. */
const recorder: Logger = {
  ...silentLogger,
  debug: (_obj, msg) => void (msg === "connecting to proxy server" && started.push(Date.now())),
  info: (_obj, msg) => void (msg === "connected to proxy server" && connected.push(Date.now())),
  warn: (obj) => {
    const err = (obj as { err?: unknown }).err;
    if (typeof err === "string") failed.push({ at: Date.now(), reason: err });
  },
  child: () => recorder,
};

const agents: ProxyAgent[] = [];
for (let i = cfg.first ?? 0; i < (cfg.first ?? 0) + cfg.count; i++) {
  const options = resolveOptions(agentOptionsSchema, {
    "proxy-server-host": cfg.host,
    "proxy-server-port": String(cfg.port),
    "ca-cert": cfg.ca,
    "agent-cert": cfg.cert,
    "agent-key": cfg.key,
    "agent-id": `fleet-agent-${i}`,
    "cluster-name": `fleet-${i}`,
    "health-server-port": "0",
    "admin-server-port": "0",
    "sync-interval": "1s",
    "sync-interval-cap": "5s",
    "keepalive-time": "30s",
    // One process holds 1,000 agents here; each would poll its three certificate files every 10 s
    // (a real agent is one per process). The storm is about reconnecting, not reloading.
    "cert-reload-interval": "0",
  });
  agents.push(new ProxyAgent(options, { logger: recorder }));
}
for (let i = 0; i < agents.length; i += cfg.startConcurrency) {
  await Promise.all(agents.slice(i, i + cfg.startConcurrency).map((a) => a.start()));
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  const [cmd, arg] = line.trim().split(" ");
  if (cmd === "status") {
    const up = agents.filter((a) => a.connectedServers().length > 0).length;
    process.stdout.write(`${JSON.stringify({ connected: up, agents: agents.length })}\n`);
  } else if (cmd === "attempts") {
    const since = Number(arg ?? 0);
    process.stdout.write(
      `${JSON.stringify({
        started: started.filter((t) => t >= since),
        connected: connected.filter((t) => t >= since),
        failed: failed.filter((f) => f.at >= since),
      })}\n`,
    );
  }
});
lines.on("close", () => {
  void Promise.all(agents.map((a) => a.close())).then(() => process.exit(0));
});
