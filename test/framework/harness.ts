/**
 * The process harness: real `cluster-proxy` processes (the built CLI) on loopback, the
 * certificates they need, and TCP/HTTP targets. Everything started is recorded and stopped by
 * PID in {@link Harness.close}, also when a test fails.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import * as http from "node:http";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { readFileSync } from "node:fs";
import { TunnelClient } from "@cluster-proxy/client";
import { writeStandaloneCerts, type StandaloneCertPaths } from "@cluster-proxy/pki";
import { freePort } from "@cluster-proxy/tunnel/testing";
import { httpGet } from "./http.js";
import { waitForProc, type Proc } from "./process.js";
import { CLI_ARGV } from "./repo.js";

export { freePort };

/** An agent's trust and identity flags for `cluster`'s certificate (`--ca-cert`, `--agent-cert`, `--agent-key`). */
export function agentCertFlags(c: StandaloneCertPaths, cluster: string): string[] {
  const cert = c.agents.get(cluster);
  if (!cert) throw new Error(`no agent certificate for ${cluster}`);
  return [`--ca-cert=${c.ca.cert}`, `--agent-cert=${cert.cert}`, `--agent-key=${cert.key}`];
}

/**
 * The certificate flags of a proxy-server, ours or Go's (same names): both ports, mTLS, the
 * client front doors trusting the client CA and the agent port the agent CA.
 */
export function serverCertFlags(c: StandaloneCertPaths): string[] {
  return [
    `--server-cert=${c.server.cert}`,
    `--server-key=${c.server.key}`,
    `--server-ca-cert=${c.clientCa.cert}`,
    `--cluster-cert=${c.server.cert}`,
    `--cluster-key=${c.server.key}`,
    `--cluster-ca-cert=${c.agentCa.cert}`,
  ];
}

export interface ServerPorts {
  server: number;
  httpConnect: number;
  agent: number;
  health: number;
  admin: number;
}

export interface AgentHandle {
  proc: Proc;
  healthPort: number;
}

export class Harness {
  private readonly procs = new Set<Proc>();
  private readonly closers: (() => Promise<void> | void)[] = [];
  dir = "";
  certs!: StandaloneCertPaths;

  /**
   * Create a temp dir with the standalone certificate set: serving, client and agent CAs, hub
   * server/client certs (valid for `hubHosts` besides localhost and 127.0.0.1) and agent certs
   * for `clusters`.
   */
  async init(clusters: string[], hubHosts: string[] = []): Promise<this> {
    this.dir = await mkdtemp(join(tmpdir(), "cp-it-"));
    this.certs = await writeStandaloneCerts(join(this.dir, "pki"), {
      clusters,
      hubHosts: ["localhost", "127.0.0.1", ...hubHosts],
    });
    return this;
  }

  /** Run the CLI with `args`; output is kept for failure messages. */
  spawnCli(name: string, args: string[], env?: NodeJS.ProcessEnv): Proc {
    return this.spawnProc(name, process.execPath, [...CLI_ARGV, ...args], env ? { env } : {});
  }

  /**
   * Run any executable; output is kept for failure messages (stdout too unless `keepStdout` is
   * false, for binary streams read by the caller) and the process is killed by PID in
   * {@link Harness.close}. `stdin: true` pipes stdin, else it is ignored; `cwd` is where it runs.
   * `processGroup: true` starts it in a process group of its own and signals go to the whole group,
   * as a terminal's Ctrl-C does (for commands such as `npm run` that start a tree of processes).
   */
  spawnProc(
    name: string,
    command: string,
    args: string[],
    opts: { stdin?: boolean; keepStdout?: boolean; env?: NodeJS.ProcessEnv; cwd?: string; processGroup?: boolean } = {},
  ): Proc {
    const child = spawn(command, args, {
      stdio: [opts.stdin ? "pipe" : "ignore", "pipe", "pipe"],
      ...(opts.env ? { env: opts.env } : {}),
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
      ...(opts.processGroup ? { detached: true } : {}),
    });
    let out = "";
    if (opts.keepStdout !== false)
      child.stdout?.on("data", (c: Buffer) => (out = (out + c.toString()).slice(-200_000)));
    child.stderr?.on("data", (c: Buffer) => (out = (out + c.toString()).slice(-200_000)));
    const exited = new Promise<number | null>((r) => child.once("exit", (code, sig) => r(code ?? (sig ? -1 : null))));
    const proc: Proc = {
      name,
      child,
      output: () => out,
      exited,
      kill: async (signal = "SIGKILL") => {
        if (child.exitCode === null && child.signalCode === null) {
          if (opts.processGroup && child.pid !== undefined) process.kill(-child.pid, signal);
          else child.kill(signal);
        }
        const code = await exited;
        this.procs.delete(proc);
        return code;
      },
    };
    this.procs.add(proc);
    return proc;
  }

  /** Start a proxy-server process; resolves when its health port answers. */
  async startServer(extra: string[] = [], ports?: Partial<ServerPorts>): Promise<{ proc: Proc; ports: ServerPorts }> {
    const p: ServerPorts = {
      server: ports?.server ?? (await freePort()),
      httpConnect: ports?.httpConnect ?? (await freePort()),
      agent: ports?.agent ?? (await freePort()),
      health: ports?.health ?? (await freePort()),
      admin: ports?.admin ?? (await freePort()),
    };
    const c = this.certs;
    const proc = this.spawnCli("server", [
      "server",
      // gRPC and HTTP CONNECT front doors at once, and the timeouts the suites were written for
      // (the Go defaults are 1h keepalives, no dial timeout, no graceful shutdown).
      "--mode=both",
      "--keepalive-time=30s",
      "--frontend-keepalive-time=1m",
      "--backend-dial-timeout=30s",
      "--graceful-shutdown-timeout=5s",
      "--server-bind-address=127.0.0.1",
      `--server-port=${p.server}`,
      `--http-connect-port=${p.httpConnect}`,
      `--agent-bind-address=127.0.0.1`,
      `--agent-port=${p.agent}`,
      `--health-bind-address=127.0.0.1`,
      `--health-port=${p.health}`,
      `--admin-port=${p.admin}`,
      ...serverCertFlags(c),
      "--proxy-strategies=destHost",
      "--log-level=warn",
      ...extra,
    ]);
    await waitForProc(
      proc,
      `server health port ${p.health}`,
      async () => (await httpGet(`http://127.0.0.1:${p.health}/healthz`)).status === 200,
    );
    return { proc, ports: p };
  }

  /**
   * Start an agent process for `cluster` against `agentPort` (with `env` instead of ours when
   * given); resolves when it is ready.
   */
  async startAgent(
    cluster: string,
    agentPort: number,
    extra: string[] = [],
    waitReady = true,
    env?: NodeJS.ProcessEnv,
  ): Promise<AgentHandle> {
    const healthPort = await freePort();
    const proc = this.spawnCli(
      `agent-${cluster}`,
      [
        "agent",
        "--proxy-server-host=127.0.0.1",
        `--proxy-server-port=${agentPort}`,
        ...agentCertFlags(this.certs, cluster),
        `--cluster-name=${cluster}`,
        "--health-server-host=127.0.0.1",
        `--health-server-port=${healthPort}`,
        `--admin-server-port=0`,
        "--sync-interval=100ms",
        "--sync-interval-cap=1s",
        "--keepalive-time=1s",
        "--keepalive-timeout=1s",
        "--log-level=warn",
        ...extra,
      ],
      env,
    );
    if (waitReady) {
      await waitForProc(
        proc,
        `agent ${cluster} ready`,
        async () => (await httpGet(`http://127.0.0.1:${healthPort}/readyz`)).status === 200,
      );
    }
    return { proc, healthPort };
  }

  /** A hub client's TLS options: the serving CA to trust and the client certificate and key. */
  clientTls(): { ca: Buffer; cert: Buffer; key: Buffer } {
    return {
      ca: readFileSync(this.certs.ca.cert),
      cert: readFileSync(this.certs.client.cert),
      key: readFileSync(this.certs.client.key),
    };
  }

  /**
   * A TunnelClient to the gRPC door on `serverPort` with the hub client certificate (dial timeout
   * 10 s), closed with the harness.
   */
  tunnelClient(serverPort: number): TunnelClient {
    const client = new TunnelClient({
      proxy: { host: "127.0.0.1", port: serverPort, ...this.clientTls() },
      dialTimeoutMs: 10_000,
    });
    this.onClose(() => client.close());
    return client;
  }

  /** Register something to close at the end. */
  onClose(fn: () => Promise<void> | void): void {
    this.closers.push(fn);
  }

  async close(): Promise<void> {
    await Promise.all([...this.procs].map((p) => p.kill("SIGKILL")));
    for (const fn of this.closers.reverse()) await fn();
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

/**
 * Writes `payload` to `s`, whose far end echoes, and resolves with whether exactly those bytes came
 * back (once as many arrived as were sent); destroys `s`.
 */
export async function echoRoundTrip(s: Duplex, payload: Buffer): Promise<boolean> {
  const back: Buffer[] = [];
  let n = 0;
  const done = new Promise<void>((resolve, reject) => {
    s.on("data", (c: Buffer) => {
      back.push(c);
      n += c.length;
      if (n >= payload.length) resolve();
    });
    s.once("error", reject);
  });
  s.write(payload);
  await done;
  s.destroy();
  return Buffer.concat(back).equals(payload);
}

/**
 * A round-robin L4 balancer on loopback in front of `ports` (e.g. the agent ports of servers
 * started with `--server-count`), closed with the harness; resolves with its port.
 */
export async function tcpBalancer(h: Harness, ports: readonly number[]): Promise<number> {
  let next = 0;
  const lb = net.createServer((down) => {
    const up = net.connect(ports[next++ % ports.length]!, "127.0.0.1");
    down.pipe(up).pipe(down);
    // Either side's end or error ends the other (a balancer holds no half-open pairs).
    up.on("error", () => down.destroy());
    down.on("error", () => up.destroy());
    up.on("close", () => down.destroy());
    down.on("close", () => up.destroy());
  });
  return listenOnLoopback(h, lb);
}

/** The sum of every sample of the Prometheus series starting with `name` on a loopback `/metrics` port. */
export async function metricSum(port: number, name: string): Promise<number> {
  const { body } = await httpGet(`http://127.0.0.1:${port}/metrics`);
  let total = 0;
  for (const line of body.split("\n")) if (line.startsWith(name)) total += Number(line.split(" ").pop());
  return total;
}

/** A TCP server that echoes everything back. */
export async function echoServer(h: Harness): Promise<number> {
  const srv = net.createServer((s) => {
    s.on("error", () => undefined);
    s.pipe(s);
  });
  return listenOnLoopback(h, srv);
}

/** An HTTP server answering `hello from <name> <url>`. */
export async function helloServer(h: Harness, name: string): Promise<number> {
  const srv = http.createServer((req, res) => res.end(`hello from ${name} ${req.url}`));
  return listenOnLoopback(h, srv);
}

/**
 * A TCP server for byte-exact transfers: {@link serveTransfer} on every connection.
 */
export async function transferServer(h: Harness, onSourceBlocked?: (seed: number) => void): Promise<number> {
  return listenOnLoopback(
    h,
    net.createServer((s) => serveTransfer(s, onSourceBlocked)),
  );
}

/**
 * One byte-exact transfer. A connection's first line picks the mode: `sink <bytes>\n` reads
 * exactly that many bytes and answers with their sha256 (the tunnel has no half-close, so the
 * length tells the end); `source <bytes> <seed>\n` writes that many deterministic bytes
 * ({@link PatternStream} in 256 KiB chunks, see {@link patternHash}) then closes.
 * `onSourceBlocked(seed)` is called each time a `source` transfer's writes are held back (the
 * reader, or the tunnel's flow control, stopped taking bytes): the event a test waits for instead of
 * sleeping until a stalled reader's budget is full.
 */
export function serveTransfer(s: net.Socket, onSourceBlocked?: (seed: number) => void): void {
  s.on("error", () => undefined);
  let head = Buffer.alloc(0);
  const onHead = (chunk: Buffer): void => {
    head = Buffer.concat([head, chunk]);
    const nl = head.indexOf(10);
    if (nl < 0) return;
    s.off("data", onHead);
    const [mode, a, b] = head.subarray(0, nl).toString().split(" ");
    const rest = head.subarray(nl + 1);
    if (mode === "sink") {
      const want = Number(a);
      const hash = createHash("sha256");
      let n = 0;
      const take = (c: Buffer): void => {
        hash.update(c);
        n += c.length;
        if (n >= want) s.end(`${hash.digest("hex")} ${n}\n`);
      };
      take(rest);
      if (n < want) s.on("data", take);
    } else {
      const total = Number(a);
      const seed = Number(b ?? 1);
      const gen = new PatternStream(seed);
      let sent = 0;
      const pump = (): void => {
        while (sent < total && !s.destroyed) {
          const chunk = gen.next(Math.min(TRANSFER_CHUNK, total - sent));
          sent += chunk.length;
          if (!s.write(chunk)) {
            onSourceBlocked?.(seed);
            return void s.once("drain", pump);
          }
        }
        s.end();
      };
      pump();
    }
  };
  s.on("data", onHead);
}

/** Chunk size of a `source` transfer (the pattern depends on it). */
const TRANSFER_CHUNK = 256 * 1024;

/** sha256 of what `source <bytes> <seed>` sends. */
export function patternHash(bytes: number, seed: number): string {
  const gen = new PatternStream(seed);
  const hash = createHash("sha256");
  for (let left = bytes; left > 0; left -= TRANSFER_CHUNK) hash.update(gen.next(Math.min(TRANSFER_CHUNK, left)));
  return hash.digest("hex");
}

/** Deterministic pseudo-random bytes (xorshift), so both ends can compute the same hash. */
export class PatternStream {
  private x: number;
  constructor(seed: number) {
    this.x = seed | 0 || 1;
  }
  next(n: number): Buffer {
    const buf = Buffer.allocUnsafe(n);
    for (let i = 0; i + 4 <= n; i += 4) {
      this.x ^= this.x << 13;
      this.x ^= this.x >>> 17;
      this.x ^= this.x << 5;
      buf.writeInt32LE(this.x, i);
    }
    for (let i = n - (n % 4); i < n; i++) buf[i] = i & 0xff;
    return buf;
  }
}

/**
 * Listens on an ephemeral port of 127.0.0.1 and resolves with it; the harness destroys the
 * server's open connections and closes it.
 */
export async function listenOnLoopback(h: Harness, srv: net.Server): Promise<number> {
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const sockets = new Set<net.Socket>();
  srv.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  h.onClose(async () => {
    for (const s of sockets) s.destroy();
    srv.close();
    await once(srv, "close").catch(() => undefined);
  });
  return (srv.address() as net.AddressInfo).port;
}
