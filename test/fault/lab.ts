/**
 * The fault suite's lab: a hub network namespace and two cluster namespaces (mc1, mc2), each
 * joined to the hub by its own veth pair, created by the test and deleted by name. The proxy
 * server runs in the hub, an agent and a transfer target in each cluster, all real processes
 * started with `ip netns exec` and stopped by PID.
 *
 * The test runner (scripts/test.sh puts it in a loopback-only namespace) never routes into the
 * lab: it reaches the server's front doors through its Unix sockets (files are visible from any
 * namespace) and the health and admin ports through a small Unix-socket bridge in each
 * namespace. Faults are applied to the links only: `ip link set down` (link down) and an nftables
 * drop of everything on a cluster's link (a silent blackhole: no RST, no ICMP).
 *
 * Every port inside a namespace is fixed (each namespace has its own port space), so a restarted
 * server comes back where its agents expect it.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import * as http from "node:http";
import { join } from "node:path";
import type { ProcessStats } from "@cluster-proxy/kit/process";
import { CLI_ARGV, REPO } from "../framework/repo.js";
import { Harness, agentCertFlags, serverCertFlags } from "../framework/harness.js";
import { prerequisiteSkip } from "../framework/prerequisites.js";
import { waitFor } from "../framework/waits.js";
import { waitForProc, type Proc } from "../framework/process.js";

export type ClusterName = "mc1" | "mc2";
export const CLUSTERS: readonly ClusterName[] = ["mc1", "mc2"];

/** Ports inside the namespaces. */
export const PORT = {
  agent: 8091,
  serverHealth: 8092,
  serverAdmin: 8095,
  agentHealth: 8093,
  agentAdmin: 8094,
  target: 9000,
} as const;

/** Hub side and cluster side of a cluster's link. */
function linkAddresses(c: ClusterName): { hub: string; cluster: string } {
  const net = c === "mc1" ? 1 : 2;
  return { hub: `10.201.${net}.1`, cluster: `10.201.${net}.2` };
}

/** Why this machine cannot run the fault suite, or undefined when it can. */
export function labUnavailable(): string | undefined {
  if (process.platform !== "linux" || process.getuid?.() !== 0) return "needs root on Linux (network namespaces)";
  if (spawnSync("ip", ["-V"]).status !== 0) return "needs iproute2 ('ip')";
  if (spawnSync("sh", ["-c", "command -v nft"]).status !== 0) {
    return "needs nftables ('nft'); scripts/test.sh installs it before entering its namespace";
  }
  const routes = spawnSync("ip", ["route", "show", "default"], { encoding: "utf8" }).stdout.trim();
  if (routes !== "") {
    return "the test runner must run in a namespace without a default route (scripts/test.sh does this)";
  }
  return undefined;
}

/** {@link prerequisiteSkip} for the fault suites. */
export function labSkip(): { skip: string | false; missing?: string } {
  return prerequisiteSkip(labUnavailable());
}

function sh(cmd: string, args: string[], input?: string): void {
  const r = spawnSync(cmd, args, { encoding: "utf8", input, timeout: 10_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.error?.message || r.status}`);
}

export interface ServerHandle {
  proc: Proc;
  /** gRPC front door (plain, Unix socket). */
  grpcSock: string;
  /** HTTP CONNECT front door (plain, Unix socket). */
  connectSock: string;
}

export interface AgentHandle {
  proc: Proc;
  cluster: ClusterName;
}

export class FaultLab {
  readonly h = new Harness();
  readonly tag = `cpf${process.pid}`;
  readonly hubNs = `${this.tag}-hub`;
  private readonly created: string[] = [];

  ns(c: ClusterName): string {
    return `${this.tag}-${c}`;
  }

  /** Unix socket (in the lab's temp dir) of something in the namespaces. */
  sock(name: string): string {
    return join(this.h.dir, `${name}.sock`);
  }

  private vethHub(c: ClusterName): string {
    return `${this.tag}h${c.slice(2)}`;
  }

  private vethCluster(c: ClusterName): string {
    return `${this.tag}c${c.slice(2)}`;
  }

  /** Certificates, namespaces, links, targets and the bridges. */
  async init(): Promise<this> {
    await this.h.init(
      [...CLUSTERS],
      CLUSTERS.map((c) => linkAddresses(c).hub),
    );
    this.h.onClose(() => this.deleteNamespaces());
    for (const ns of [this.hubNs, ...CLUSTERS.map((c) => this.ns(c))]) {
      sh("ip", ["netns", "add", ns]);
      this.created.push(ns);
      sh("ip", ["-n", ns, "link", "set", "lo", "up"]);
    }
    for (const c of CLUSTERS) {
      const a = linkAddresses(c);
      const [vh, vc] = [this.vethHub(c), this.vethCluster(c)];
      sh("ip", ["-n", this.hubNs, "link", "add", vh, "type", "veth", "peer", "name", vc, "netns", this.ns(c)]);
      sh("ip", ["-n", this.hubNs, "addr", "add", `${a.hub}/30`, "dev", vh]);
      sh("ip", ["-n", this.ns(c), "addr", "add", `${a.cluster}/30`, "dev", vc]);
      sh("ip", ["-n", this.hubNs, "link", "set", vh, "up"]);
      sh("ip", ["-n", this.ns(c), "link", "set", vc, "up"]);
    }
    const bridge = join(REPO, "test/infra/env/bridge.mjs");
    this.inNs(this.hubNs, "bridge-hub", process.execPath, [
      bridge,
      `${this.sock("server-health")}=127.0.0.1:${PORT.serverHealth}`,
      `${this.sock("server-admin")}=127.0.0.1:${PORT.serverAdmin}`,
    ]);
    for (const c of CLUSTERS) {
      this.inNs(this.ns(c), `bridge-${c}`, process.execPath, [
        bridge,
        `${this.sock(`${c}-health`)}=127.0.0.1:${PORT.agentHealth}`,
        `${this.sock(`${c}-admin`)}=127.0.0.1:${PORT.agentAdmin}`,
      ]);
      const target = this.inNs(this.ns(c), `target-${c}`, process.execPath, [
        "--conditions=source",
        "--import",
        "tsx",
        join(REPO, "test/fault/target.ts"),
        String(PORT.target),
      ]);
      await waitFor(`target in ${c}\n${target.output()}`, () => target.output().includes("listening"));
    }
    return this;
  }

  /** Run a command inside `ns` (`ip netns exec` execs it: the PID is the command's). */
  inNs(ns: string, name: string, cmd: string, args: string[], opts: { stdin?: boolean } = {}): Proc {
    return this.h.spawnProc(name, "ip", ["netns", "exec", ns, cmd, ...args], opts);
  }

  /** Start the proxy-server in the hub; resolves when its health port answers. */
  async startServer(extra: string[] = []): Promise<ServerHandle> {
    const grpcSock = this.sock("server-grpc");
    const connectSock = this.sock("server-connect");
    const proc = this.inNs(this.hubNs, "server", process.execPath, [
      ...CLI_ARGV,
      "server",
      "--mode=both",
      "--server-port=0",
      `--uds-name=${grpcSock}`,
      "--http-connect-port=0",
      `--http-connect-uds-name=${connectSock}`,
      "--delete-existing-uds-file",
      "--agent-bind-address=0.0.0.0",
      `--agent-port=${PORT.agent}`,
      "--health-bind-address=127.0.0.1",
      `--health-port=${PORT.serverHealth}`,
      `--admin-port=${PORT.serverAdmin}`,
      "--enable-profiling",
      ...serverCertFlags(this.h.certs),
      "--proxy-strategies=destHost",
      "--keepalive-time=1s",
      "--keepalive-timeout=2s",
      "--backend-dial-timeout=5s",
      "--graceful-shutdown-timeout=1s",
      "--log-level=warn",
      ...extra,
    ]);
    await waitForProc(proc, "server health", async () => (await this.get("server-health", "/healthz")).status === 200);
    return { proc, grpcSock, connectSock };
  }

  /** Start the agent of `c`; resolves when it is connected (unless `waitReady` is false). */
  async startAgent(c: ClusterName, extra: string[] = [], waitReady = true): Promise<AgentHandle> {
    const proc = this.inNs(this.ns(c), `agent-${c}`, process.execPath, [
      ...CLI_ARGV,
      "agent",
      `--proxy-server-host=${linkAddresses(c).hub}`,
      `--proxy-server-port=${PORT.agent}`,
      ...agentCertFlags(this.h.certs, c),
      `--cluster-name=${c}`,
      "--health-server-host=127.0.0.1",
      `--health-server-port=${PORT.agentHealth}`,
      `--admin-server-port=${PORT.agentAdmin}`,
      "--enable-profiling",
      "--sync-interval=200ms",
      "--sync-interval-cap=1s",
      "--keepalive-time=1s",
      "--keepalive-timeout=1s",
      "--log-level=warn",
      ...extra,
    ]);
    const handle = { proc, cluster: c };
    if (waitReady) {
      await waitForProc(proc, `agent ${c} ready`, () => this.isAgentReady(c));
    }
    return handle;
  }

  /** Wait until the agent of `c` holds a server connection. */
  async agentReady(c: ClusterName, timeoutMs = 15_000): Promise<void> {
    await waitFor(`agent ${c} ready`, () => this.isAgentReady(c), timeoutMs);
  }

  /** Whether the agent of `c` answers its readiness probe with 200 (holds a server connection). */
  private async isAgentReady(c: ClusterName): Promise<boolean> {
    return (await this.get(`${c}-health`, "/readyz")).status === 200;
  }

  /** Agent streams the server holds for cluster `c` (its backends metric). */
  async serverBackends(c: string): Promise<number> {
    const { body } = await this.get("server-health", "/metrics");
    let n = 0;
    for (const m of body.matchAll(/^cluster_proxy_server_backends\{identifier="([^"]*)"\} (\d+)$/gm)) {
      if (m[1] === c || m[1] === `host=${c}`) n = Math.max(n, Number(m[2]));
    }
    return n;
  }

  /** Wait until the server routes to an agent of every cluster in `clusters`. */
  async serverSees(clusters: readonly ClusterName[], timeoutMs = 15_000): Promise<void> {
    await waitFor(
      `server to see agents of ${clusters.join(", ")}`,
      async () => {
        for (const c of clusters) if ((await this.serverBackends(c)) < 1) return false;
        return true;
      },
      timeoutMs,
    );
  }

  /** GET `path` from a bridged health/admin port; a fresh connection each time (no keep-alive). */
  get(sockName: string, path: string, timeoutMs = 5_000): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = http.get({ socketPath: this.sock(sockName), path, agent: false }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on("error", reject);
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`GET ${path} via ${sockName} timed out`)));
    });
  }

  /** A process's figures after a full GC (its admin port's /debug/process?gc=1). */
  async stats(admin: "server-admin" | `${ClusterName}-admin`): Promise<ProcessStats> {
    const r = await this.get(admin, "/debug/process?gc=1");
    if (r.status !== 200) throw new Error(`${admin} /debug/process: HTTP ${r.status} ${r.body}`);
    return JSON.parse(r.body) as ProcessStats;
  }

  /** Take a cluster's link down (both ends lose carrier) or bring it back. */
  link(c: ClusterName, up: boolean): void {
    sh("ip", ["-n", this.hubNs, "link", "set", this.vethHub(c), up ? "up" : "down"]);
  }

  /** Drop every packet on a cluster's link, both ways, without a word (or stop dropping). */
  blackhole(c: ClusterName, on: boolean): void {
    const ns = this.ns(c);
    if (!on) return sh("ip", ["netns", "exec", ns, "nft", "delete", "table", "inet", "cpfault"]);
    const v = this.vethCluster(c);
    sh(
      "ip",
      ["netns", "exec", ns, "nft", "-f", "-"],
      [
        "table inet cpfault {",
        `  chain in { type filter hook input priority 0; policy accept; iifname "${v}" drop; }`,
        `  chain out { type filter hook output priority 0; policy accept; oifname "${v}" drop; }`,
        "}",
      ].join("\n"),
    );
  }

  private deleteNamespaces(): void {
    for (const ns of this.created.splice(0)) {
      const pids = spawnSync("ip", ["netns", "pids", ns], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
      for (const pid of pids) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          /* gone */
        }
      }
      spawnSync("ip", ["netns", "del", ns]);
    }
  }

  async close(): Promise<void> {
    await this.h.close();
  }
}

/** VmRSS of a process in MiB. */
export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}
