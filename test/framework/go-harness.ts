/**
 * Interop harness: the real Go konnectivity binaries (built or reused by `scripts/go-peers.mjs`)
 * as processes next to ours, plus the targets and client drivers the interop matrix needs.
 * Every process is started through {@link Harness.spawnProc}, so `Harness.close()` kills it by
 * PID even when a test fails. Only 127.0.0.0/8 and ::1 are used.
 */
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import { join } from "node:path";
import { TunnelClient, dial, type TunnelSocket } from "@cluster-proxy/client";
import { PROXY_METHOD, PacketType, decodePacket, encodePacket } from "@cluster-proxy/protocol";
import { FRAME_HEADER, connectSession, openCall, sealFrame } from "@cluster-proxy/tunnel";
import { PatternStream, agentCertFlags, freePort, listenOnLoopback, serverCertFlags, type Harness } from "./harness.js";
import { httpGet } from "./http.js";
import type { Proc } from "./process.js";
import { REPO } from "./repo.js";
import { waitFor } from "./waits.js";
import { errorMessage } from "@cluster-proxy/errors";

export const MiB = 1024 * 1024;

/** Pairings that ran in this process, printed by {@link reportPairings}. */
const ran: string[] = [];
export function notePairing(name: string): void {
  ran.push(name);
  process.stdout.write(`interop: pairing ran: ${name}\n`);
}
export function reportPairings(file: string): void {
  process.stdout.write(`interop: ${file}: ${ran.length} pairing(s) ran:\n${ran.map((r) => `  - ${r}`).join("\n")}\n`);
}

let binDir: string | undefined;
/**
 * The directory of the real Go binaries. Runs `node scripts/go-peers.mjs` (progress on stderr;
 * a warm cache answers in ~0.1 s). A missing Go toolchain or a failed build is an error, never
 * a skip.
 */
export function goBin(): string {
  if (binDir) return binDir;
  process.stderr.write("interop: building or reusing the Go konnectivity peers (node scripts/go-peers.mjs)\n");
  let out: string;
  try {
    out = execFileSync(process.execPath, [join(REPO, "scripts/go-peers.mjs")], {
      cwd: REPO,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
    });
  } catch (err) {
    throw new Error(
      "interop tests need the real Go konnectivity binaries, and `node scripts/go-peers.mjs` failed " +
        "(is Go >= 1.26.2 on PATH? see docs/testing/go-peers.md and the go-peers error above): " +
        errorMessage(err),
      { cause: err },
    );
  }
  const dir = out.trim().split("\n").pop() ?? "";
  if (!dir.startsWith("/")) throw new Error(`scripts/go-peers.mjs printed no bin dir: ${JSON.stringify(out)}`);
  binDir = dir;
  return dir;
}

export async function ready(port: number, path = "/readyz"): Promise<boolean> {
  return (await httpGet(`http://127.0.0.1:${port}${path}`)).status === 200;
}

/** Sum of all samples of a metric (any labels) on a /metrics page. */
export async function metric(port: number, name: string, labels = ""): Promise<number> {
  const { body } = await httpGet(`http://127.0.0.1:${port}/metrics`);
  let total = 0;
  for (const line of body.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== " " && rest[0] !== "{") continue;
    if (labels && !rest.includes(labels)) continue;
    total += Number(line.split(" ").pop());
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Servers and agents

export interface ServerCtl {
  kind: "go" | "ts";
  proc: Proc;
  /** gRPC front door (mTLS). */
  grpcPort: number;
  /** HTTP CONNECT door (ours: --http-connect-port in --mode=both). */
  connectPort?: number;
  agentPort: number;
  healthPort: number;
}

export interface AgentCtl {
  kind: "go" | "ts";
  name: string;
  proc: Proc;
  healthPort: number;
  /** First SIGTERM: DRAIN (both agents keep serving what they have). */
  drain(): void;
  kill(): Promise<void>;
  /** Dials this agent has made (its dial_duration_seconds histogram count). */
  dials(): Promise<number>;
}

export interface GoServerOptions {
  mode?: "grpc" | "http-connect";
  serverCount?: number;
  serverId?: string;
  strategies?: string;
  extra?: string[];
}

export async function startGoServer(h: Harness, o: GoServerOptions = {}): Promise<ServerCtl> {
  const [server, agent, health, admin] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const c = h.certs;
  const proc = h.spawnProc(`go-server${o.serverId ? `-${o.serverId}` : ""}`, join(goBin(), "proxy-server"), [
    `--mode=${o.mode ?? "grpc"}`,
    "--server-bind-address=127.0.0.1",
    `--server-port=${server}`,
    "--agent-bind-address=127.0.0.1",
    `--agent-port=${agent}`,
    "--health-bind-address=127.0.0.1",
    `--health-port=${health}`,
    "--admin-bind-address=127.0.0.1",
    `--admin-port=${admin}`,
    ...serverCertFlags(c),
    `--proxy-strategies=${o.strategies ?? "destHost"}`,
    `--server-count=${o.serverCount ?? 1}`,
    ...(o.serverId ? [`--server-id=${o.serverId}`] : []),
    "-v=1",
    ...(o.extra ?? []),
  ]);
  await waitFor(`Go server health port ${health}`, () => ready(health, "/healthz"), 15_000).catch((e: Error) => {
    throw new Error(`${e.message}\n${proc.output()}`);
  });
  return { kind: "go", proc, grpcPort: server, agentPort: agent, healthPort: health };
}

/**
 * Our server in the compatibility mode `--agent-identity=shared`: the interop cases route by
 * identifiers no certificate grants (`host=localhost`, `ipv4=127.0.0.1`, `ipv6=::1`, ...), as Go
 * deployments with one shared agent certificate do. A later `--agent-identity` in `extra` wins;
 * the certificate-bound mode against the Go agent is covered in our-server.test.ts.
 */
export async function startTsServer(h: Harness, extra: string[] = []): Promise<ServerCtl> {
  const { proc, ports } = await h.startServer(["--agent-identity=shared", ...extra]);
  return {
    kind: "ts",
    proc,
    grpcPort: ports.server,
    connectPort: ports.httpConnect,
    agentPort: ports.agent,
    healthPort: ports.health,
  };
}

export interface AgentOptions {
  /** Agent certificate (a cluster passed to Harness.init). */
  cluster: string;
  identifiers: string;
  agentId?: string;
  waitReady?: boolean;
}

function agentCtl(kind: "go" | "ts", name: string, proc: Proc, healthPort: number): AgentCtl {
  return {
    kind,
    name,
    proc,
    healthPort,
    drain: () => void proc.child.kill("SIGTERM"),
    kill: async () => void (await proc.kill("SIGKILL")),
    dials: () => metric(healthPort, "konnectivity_network_proxy_agent_dial_duration_seconds_count"),
  };
}

export async function startGoAgent(h: Harness, agentPort: number, o: AgentOptions): Promise<AgentCtl> {
  const [healthPort, adminPort] = [await freePort(), await freePort()];
  const name = o.agentId ?? `go-agent-${o.cluster}`;
  const proc = h.spawnProc(name, join(goBin(), "proxy-agent"), [
    "--proxy-server-host=127.0.0.1",
    `--proxy-server-port=${agentPort}`,
    ...agentCertFlags(h.certs, o.cluster),
    `--agent-id=${name}`,
    `--agent-identifiers=${o.identifiers}`,
    "--health-server-host=127.0.0.1",
    `--health-server-port=${healthPort}`,
    "--admin-bind-address=127.0.0.1",
    `--admin-server-port=${adminPort}`,
    "--sync-interval=100ms",
    "--sync-interval-cap=1s",
    "--probe-interval=100ms",
    "-v=1",
  ]);
  if (o.waitReady !== false) {
    await waitFor(`Go agent ${name} ready`, () => ready(healthPort), 15_000).catch((e: Error) => {
      throw new Error(`${e.message}\n${proc.output()}`);
    });
  }
  return agentCtl("go", name, proc, healthPort);
}

/**
 * Our agent. Keepalive stays at 30 s: the Go server's agent port enforces a 30 s minimum ping
 * interval (GOAWAY too_many_pings otherwise); the integration harness's 1 s is overridden.
 */
export async function startTsAgent(h: Harness, agentPort: number, o: AgentOptions): Promise<AgentCtl> {
  const name = o.agentId ?? `ts-agent-${o.cluster}`;
  const a = await h.startAgent(
    o.cluster,
    agentPort,
    [`--agent-identifiers=${o.identifiers}`, `--agent-id=${name}`, "--keepalive-time=30s", "--keepalive-timeout=10s"],
    o.waitReady !== false,
  );
  return agentCtl("ts", name, a.proc, a.healthPort);
}

// ---------------------------------------------------------------------------------------------
// Targets

/**
 * A TCP target whose connects hang: a stopped child process listening with backlog 1 whose
 * accept queue we fill, so the kernel drops further SYNs. Dials to it stay pending until the
 * agent's 5 s dial timeout: good for cancelling mid-dial.
 */
export async function hangTarget(h: Harness): Promise<number> {
  const child = spawn(
    process.execPath,
    [
      "-e",
      'require("net").createServer().listen({port:0,host:"127.0.0.1",backlog:1},function(){console.log(this.address().port)})',
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const [chunk] = (await once(child.stdout, "data")) as [Buffer];
  const port = Number(chunk.toString().trim());
  child.kill("SIGSTOP");
  const fill: net.Socket[] = [];
  for (let i = 0; i < 6; i++) {
    const s = net.connect(port, "127.0.0.1");
    s.on("error", () => undefined);
    fill.push(s);
    const ok = await Promise.race([
      once(s, "connect").then(() => true),
      new Promise((r) => setTimeout(() => r(false), 300)),
    ]);
    if (!ok) break;
  }
  h.onClose(() => {
    for (const s of fill) s.destroy();
    child.kill("SIGKILL");
  });
  return port;
}

/** Echo target that records, per connection, whether the peer's FIN (`end`) arrived. */
export async function finTarget(h: Harness): Promise<{ port: number; ends: () => number; conns: () => number }> {
  let ends = 0;
  let conns = 0;
  const srv = net.createServer((s) => {
    conns++;
    s.on("error", () => undefined);
    s.on("data", (c: Buffer) => s.write(c));
    s.on("end", () => {
      ends++;
      s.end();
    });
  });
  return { port: await listenOnLoopback(h, srv), ends: () => ends, conns: () => conns };
}

/** HTTP target answering `<name> <path>` on each of `hosts` (same port). */
export async function namedHttp(h: Harness, hosts: { host: string; name: string }[], port?: number): Promise<number> {
  const p = port ?? (await freePort());
  for (const { host, name } of hosts) {
    const srv = http.createServer((req, res) => res.end(`${name} ${req.url}`));
    srv.listen(p, host);
    await once(srv, "listening");
    h.onClose(() => {
      srv.closeAllConnections();
      srv.close();
    });
  }
  return p;
}

/** Expected sha256 of `n` PatternStream bytes with `seed`. */
export function patternHash(n: number, seed: number): string {
  const gen = new PatternStream(seed);
  const hash = createHash("sha256");
  for (let done = 0; done < n; done += MiB) hash.update(gen.next(Math.min(MiB, n - done)));
  return hash.digest("hex");
}

// ---------------------------------------------------------------------------------------------
// Client drivers: the same cases driven through the Go client (a process per connection) or ours

/** One tunnelled TCP connection as seen from the client side. */
export interface Conn {
  write(b: Buffer | string): Promise<void>;
  /** Stop sending; the connection stays open for reading (Go: --stdin-eof=wait). */
  endInput(): void;
  /** Close the connection from the client side. */
  close(): void;
  received(): number;
  /** Bytes received so far (only kept when `keep` was set). */
  bytes(): Buffer;
  hash(): string;
  /** Resolves when the client saw the end: `eof` or `error: <text>`. */
  done: Promise<string>;
}

export interface Driver {
  name: string;
  /** HTTP GET through a single-use tunnel: the body, or rejects with the client's error text. */
  get(url: string, timeoutMs?: number): Promise<string>;
  /**
   * Raw HTTP/1.0 GET of `path` on the dial address `address` exactly as given (no URL parsing,
   * which would lower-case the host): the response body, or rejects with the error text.
   */
  request(address: string, path: string): Promise<string>;
  /** Open a TCP connection through a tunnel; rejects with the dial error text. */
  open(address: string, o?: { keep?: boolean; closeOnInputEnd?: boolean }): Promise<Conn>;
  /** `ok` GETs of `okUrl` and `cancel` GETs of `hangUrl` cancelled after `cancelMs`, all concurrent. */
  burst(
    okUrl: string,
    ok: number,
    hangUrl: string,
    cancel: number,
    cancelMs: number,
  ): Promise<{ ok: number; cancelled: number; errors: string[] }>;
}

function connState(keep: boolean): {
  onData: (c: Buffer) => void;
  received: () => number;
  bytes: () => Buffer;
  hash: () => string;
} {
  const h = createHash("sha256");
  const kept: Buffer[] = [];
  let n = 0;
  return {
    onData: (c) => {
      h.update(c);
      n += c.length;
      if (keep) kept.push(c);
    },
    received: () => n,
    bytes: () => Buffer.concat(kept),
    hash: () => h.copy().digest("hex"),
  };
}

/** The body of a 2xx HTTP/1.x response; throws on anything else. */
function httpBody(text: string): string {
  const [head, ...body] = text.split("\r\n\r\n");
  if (!/^HTTP\/1\.[01] 2/.test(head ?? "")) throw new Error(`unexpected response: ${head}`);
  return body.join("\r\n\r\n");
}

/** Drives `konnectivity-go-client` (our small Go program on the real konnectivity-client library). */
export class GoClientDriver implements Driver {
  readonly name = "Go konnectivity-client";
  constructor(
    private readonly h: Harness,
    private readonly proxyPort: () => number,
  ) {}

  private base(): string[] {
    const c = this.h.certs;
    return [
      "--proxy-host=127.0.0.1",
      `--proxy-port=${this.proxyPort()}`,
      `--ca-cert=${c.ca.cert}`,
      `--client-cert=${c.client.cert}`,
      `--client-key=${c.client.key}`,
    ];
  }

  run(args: string[], name = "go-client"): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const proc = this.h.spawnProc(name, join(goBin(), "konnectivity-go-client"), [...this.base(), ...args], {
      keepStdout: false,
    });
    let stdout = "";
    let stderr = "";
    proc.child.stdout?.on("data", (c: Buffer) => (stdout += c.toString()));
    proc.child.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
    return proc.exited.then(async (code) => {
      await proc.kill();
      return { code, stdout, stderr };
    });
  }

  async get(url: string, timeoutMs = 20_000): Promise<string> {
    const r = await this.run([`--url=${url}`, `--timeout=${timeoutMs}ms`]);
    if (r.code !== 0) throw new Error(r.stderr.trim());
    return r.stdout;
  }

  async request(address: string, path: string): Promise<string> {
    const proc = this.h.spawnProc(
      "go-client-request",
      join(goBin(), "konnectivity-go-client"),
      [...this.base(), "--mode=tcp", `--address=${address}`, "--stdin-eof=wait", "--timeout=20s"],
      { stdin: true, keepStdout: false },
    );
    let stdout = "";
    let stderr = "";
    proc.child.stdout?.on("data", (c: Buffer) => (stdout += c.toString()));
    proc.child.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
    proc.child.stdin?.on("error", () => undefined);
    proc.child.stdin?.end(`GET ${path} HTTP/1.0\r\nHost: x\r\n\r\n`);
    const code = await proc.exited;
    await proc.kill();
    if (code !== 0) throw new Error(stderr.trim());
    return httpBody(stdout);
  }

  async open(address: string, o: { keep?: boolean; closeOnInputEnd?: boolean } = {}): Promise<Conn> {
    const proc = this.h.spawnProc(
      "go-client-tcp",
      join(goBin(), "konnectivity-go-client"),
      [
        ...this.base(),
        "--mode=tcp",
        `--address=${address}`,
        `--stdin-eof=${o.closeOnInputEnd ? "close" : "wait"}`,
        "--timeout=0",
      ],
      { stdin: true, keepStdout: false },
    );
    const st = connState(o.keep ?? false);
    let stderr = "";
    proc.child.stdout?.on("data", st.onData);
    proc.child.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
    proc.child.stdin?.on("error", () => undefined);
    const stdoutEnd = once(proc.child.stdout!, "end").catch(() => undefined);
    const done = proc.exited.then(async (code) => {
      await stdoutEnd;
      await proc.kill();
      return code === 0 ? "eof" : `error: ${stderr.trim()}`;
    });
    // The Go client dials first and only then reads stdin; a dial error ends the process at once.
    // Treat "still running after the dial had time" or "some output" as connected.
    const failed = await Promise.race([
      done.then((how) => (how === "eof" && st.received() > 0 ? undefined : how)),
      new Promise<undefined>((r) => setTimeout(() => r(undefined), 400)),
    ]);
    if (failed !== undefined) throw new Error(failed.replace(/^error: /, ""));
    const stdin = proc.child.stdin!;
    return {
      write: async (b) => {
        if (!stdin.write(b)) await Promise.race([once(stdin, "drain"), done]);
      },
      endInput: () => void stdin.end(),
      close: () => void stdin.end(),
      received: st.received,
      bytes: st.bytes,
      hash: st.hash,
      done,
    };
  }

  async burst(
    okUrl: string,
    ok: number,
    hangUrl: string,
    cancel: number,
    cancelMs: number,
  ): Promise<{ ok: number; cancelled: number; errors: string[] }> {
    const [a, b] = await Promise.all([
      this.run(
        [`--url=${okUrl}`, `--count=${ok}`, `--concurrency=${ok}`, "--quiet", "--timeout=20s"],
        "go-client-burst",
      ),
      this.run(
        [`--url=${hangUrl}`, `--count=${cancel}`, `--concurrency=${cancel}`, "--quiet", `--timeout=${cancelMs}ms`],
        "go-client-cancel",
      ),
    ]);
    const total = (s: string, key: string): number => Number(new RegExp(`${key}=(\\d+)`).exec(s)?.[1] ?? -1);
    const out = `${a.stdout}\n${a.stderr}`;
    const outB = `${b.stdout}\n${b.stderr}`;
    const errors = out.split("\n").filter((l) => / x /.test(l));
    // A cancelled request is a failed one whose error is the deadline, nothing else.
    const cancelled = total(outB, "failed");
    for (const line of outB.split("\n").filter((l) => / x /.test(l))) {
      if (!/context deadline exceeded/.test(line)) errors.push(`unexpected cancel error: ${line}`);
    }
    return { ok: total(out, "ok"), cancelled, errors };
  }
}

/** Drives our client SDK (`dial` single-use tunnels, like CreateSingleUseGrpcTunnel). */
export class TsClientDriver implements Driver {
  readonly name = "our client SDK";
  constructor(
    private readonly h: Harness,
    private readonly proxyPort: () => number,
  ) {}

  proxy(): { host: string; port: number; ca: Buffer; cert: Buffer; key: Buffer } {
    const c = this.h.certs;
    return {
      host: "127.0.0.1",
      port: this.proxyPort(),
      ca: readFileSync(c.ca.cert),
      cert: readFileSync(c.client.cert),
      key: readFileSync(c.client.key),
    };
  }

  dial(address: string, o: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<TunnelSocket> {
    return dial(address, { proxy: this.proxy(), timeoutMs: o.timeoutMs ?? 20_000, signal: o.signal });
  }

  get(url: string): Promise<string> {
    const u = new URL(url);
    return this.request(u.port ? u.host : `${u.host}:80`, `${u.pathname}${u.search}`);
  }

  async request(address: string, path: string): Promise<string> {
    const s = await this.dial(address);
    const st = connState(true);
    s.on("data", st.onData);
    const done = new Promise<void>((resolve, reject) => {
      s.once("end", () => resolve());
      s.once("error", reject);
    });
    s.write(`GET ${path} HTTP/1.0\r\nHost: x\r\n\r\n`);
    await done;
    s.destroy();
    return httpBody(st.bytes().toString());
  }

  async open(address: string, o: { keep?: boolean; closeOnInputEnd?: boolean } = {}): Promise<Conn> {
    const s = await this.dial(address);
    const st = connState(o.keep ?? false);
    s.on("data", st.onData);
    const done = new Promise<string>((resolve) => {
      s.once("end", () => resolve("eof"));
      s.once("error", (e) => resolve(`error: ${e.message}`));
    });
    void done.then(() => s.destroy());
    return {
      write: async (b) => {
        if (!s.write(b)) await Promise.race([once(s, "drain"), done]);
      },
      // No half-close in konnectivity: stopping to send needs no packet.
      endInput: () => undefined,
      close: () => void s.end(),
      received: st.received,
      bytes: st.bytes,
      hash: st.hash,
      done,
    };
  }

  async burst(
    okUrl: string,
    ok: number,
    hangUrl: string,
    cancel: number,
    cancelMs: number,
  ): Promise<{ ok: number; cancelled: number; errors: string[] }> {
    const errors: string[] = [];
    let okN = 0;
    let cancelled = 0;
    const hang = new URL(hangUrl).host;
    await Promise.all([
      ...Array.from({ length: ok }, async () => {
        try {
          if ((await this.get(okUrl)).length > 0) okN++;
        } catch (e) {
          errors.push(errorMessage(e));
        }
      }),
      ...Array.from({ length: cancel }, async () => {
        const ac = new AbortController();
        const t = setTimeout(() => ac.abort(), cancelMs);
        try {
          const s = await this.dial(hang, { signal: ac.signal });
          s.destroy();
          errors.push("a dial to the hanging target succeeded");
        } catch (e) {
          if ((e as { reason?: string }).reason === "context") cancelled++;
          else errors.push(errorMessage(e));
        } finally {
          clearTimeout(t);
        }
      }),
    ]);
    return { ok: okN, cancelled, errors };
  }
}

/** A reusable TunnelClient for quick checks (closed by the harness). */
export function tsClient(h: Harness, port: number): TunnelClient {
  const c = h.certs;
  const client = new TunnelClient({
    proxy: {
      host: "127.0.0.1",
      port,
      ca: readFileSync(c.ca.cert),
      cert: readFileSync(c.client.cert),
      key: readFileSync(c.client.key),
    },
    dialTimeoutMs: 10_000,
  });
  h.onClose(() => client.close());
  return client;
}

/**
 * Send one raw DIAL_REQ with a chosen int64 `random` on `/ProxyService/Proxy` and return the
 * DIAL_RSP's random and connectID (then close the connection properly).
 */
export async function rawDial(
  h: Harness,
  port: number,
  address: string,
  random: bigint,
): Promise<{ random: bigint; connectID: bigint; error: string }> {
  const c = h.certs;
  const session = await connectSession({
    host: "127.0.0.1",
    port,
    tls: {
      ca: readFileSync(c.ca.cert),
      cert: readFileSync(c.client.cert),
      key: readFileSync(c.client.key),
    },
  });
  try {
    const call = openCall(session, PROXY_METHOD);
    const rsp = new Promise<{ random: bigint; connectID: bigint; error: string }>((resolve, reject) => {
      call.on("message", (f: Buffer) => {
        const p = decodePacket(f.subarray(FRAME_HEADER));
        if (p.type === PacketType.DIAL_RSP && "dialResponse" in p) {
          const r = p.dialResponse;
          resolve({ random: r.random, connectID: r.connectID, error: r.error });
        }
      });
      call.once("close", () => reject(new Error("Proxy call closed before DIAL_RSP")));
    });
    call.send(
      sealFrame(
        encodePacket({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address, random } }, FRAME_HEADER),
      ),
    );
    const r = await rsp;
    if (r.connectID !== 0n) {
      const closed = new Promise<void>((resolve) => {
        call.on("message", (f: Buffer) => {
          if (decodePacket(f.subarray(FRAME_HEADER)).type === PacketType.CLOSE_RSP) resolve();
        });
        setTimeout(resolve, 3000);
      });
      call.send(
        sealFrame(encodePacket({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: r.connectID } }, FRAME_HEADER)),
      );
      await closed;
    }
    call.abort({ code: 1, details: "done" });
    return r;
  } finally {
    session.destroy();
  }
}
