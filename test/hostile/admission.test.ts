/**
 * Hostile clients, admission (issue 25 part B, issue 26 item 12): silent or slow peers cannot
 * starve or hold the proxy-server, and wrong-protocol mistakes are answered at once. A real
 * server and agents (the built CLI) on loopback; the attackers are sockets of this process, bound
 * to other loopback addresses (127.0.0.2 and up) so that they are other sources than the
 * legitimate clients. Every attack is bounded in count and time; each test asserts that the server
 * and agent stay alive, that a legitimate CONNECT dial, gRPC dial and new agent get through within
 * seconds while the attack runs, and that descriptors and RSS come back near their baseline.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import * as https from "node:https";
import * as net from "node:net";
import * as tls from "node:tls";
import { TunnelClient, dialConnect } from "@cluster-proxy/client";
import { captureClientHello } from "@cluster-proxy/tunnel/testing";
import { Harness, echoRoundTrip, type AgentHandle, type ServerPorts } from "../framework/harness.js";
import { failIfMissing } from "../framework/prerequisites.js";
import { PeerNamespace, blackholePrerequisite } from "../framework/peer-namespace.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";
import { type Proc } from "../framework/process.js";
import { footprint, waitForBaseline, type Footprint } from "./process-probe.js";

/** Where the attacks come from: 127.0.0.2 .. 127.0.0.(1 + ATTACK_SOURCES). */
const ATTACK_SOURCES = 10;
/** Silent connections per TLS port. */
const SILENT = 3_000;
/** Connections that send a ClientHello and stall, from one address. */
const STALLED = 500;
/** Trickled CONNECT heads. */
const TRICKLED = 200;

/** A legitimate action must succeed within this while an attack runs (generous: busy machine). */
const WITHIN_MS = 15_000;

/** The TCP sockets of this namespace matching an `ss` filter, one line each (with their timers). */
function sockets(filter: string): string[] {
  const r = spawnSync("ss", ["-tnoH", "state", "established", filter], { encoding: "utf8", timeout: 10_000 });
  return r.stdout.split("\n").filter((l) => l.trim() !== "");
}

/** A client in its own namespace: mTLS to the CONNECT door, one CONNECT, one echo, then idle. */
const HALF_OPEN_CLIENT = `
import * as tls from "node:tls";
import { readFileSync } from "node:fs";
const e = process.env;
const s = tls.connect({ host: e.HO_HOST, port: Number(e.HO_PORT), ca: readFileSync(e.HO_CA),
  cert: readFileSync(e.HO_CERT), key: readFileSync(e.HO_KEY), servername: "localhost" },
  () => s.write("CONNECT " + e.HO_TARGET + " HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
let got = "";
s.on("data", (d) => {
  got += d;
  if (got.includes("half-open hello")) console.log("ready");
  else if (got.startsWith("HTTP/1.1 200")) s.write("half-open hello\\n");
});
s.on("error", (err) => console.log("error " + err.message));
setInterval(() => undefined, 1 << 30);
`;

let h: Harness;
let ports: ServerPorts;
let server: Proc;
let agent: AgentHandle;
let echoPort: number;
let tlsOpts: { ca: Buffer; cert: Buffer; key: Buffer };
let client: TunnelClient;
const echoSockets = new Set<net.Socket>();

/** Open `count` TCP connections to `port` from the attack addresses (250 at a time). */
async function openConnections(port: number, count: number, sources = ATTACK_SOURCES): Promise<net.Socket[]> {
  const out: net.Socket[] = [];
  for (let i = 0; i < count; i += 250) {
    const batch = Array.from({ length: Math.min(250, count - i) }, (_, j) => {
      const s = net.connect({ port, host: "127.0.0.1", localAddress: `127.0.0.${2 + ((i + j) % sources)}` });
      s.on("error", () => undefined);
      out.push(s);
      return new Promise<void>((resolve) => {
        s.once("connect", () => resolve());
        s.once("close", () => resolve());
      });
    });
    await Promise.all(batch);
  }
  return out;
}

/** Resolve with how long `action` took; fail if it takes longer than {@link WITHIN_MS}. */
async function timed(what: string, action: () => Promise<unknown>): Promise<number> {
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      action(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not succeed within ${WITHIN_MS} ms`)), WITHIN_MS);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
  return Date.now() - started;
}

/** A CONNECT dial through the mTLS door with an echo round trip. */
async function legitConnect(): Promise<void> {
  const s = await dialConnect(`127.0.0.1.east:${echoPort}`, {
    proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts },
    timeoutMs: WITHIN_MS,
  });
  assert.ok(await echoRoundTrip(s, Buffer.from("legit connect\n")));
}

/** A gRPC dial on a new session (a new TLS handshake) with an echo round trip. */
async function legitGrpc(): Promise<void> {
  const c = new TunnelClient({
    proxy: { host: "127.0.0.1", port: ports.server, ...tlsOpts },
    dialTimeoutMs: WITHIN_MS,
  });
  try {
    const s = await c.dial(`127.0.0.1.east:${echoPort}`);
    assert.ok(await echoRoundTrip(s, Buffer.from("legit grpc\n")));
  } finally {
    await c.close();
  }
}

/** A new agent process for "east" until it is ready (a fresh agent connection). */
async function legitAgent(): Promise<void> {
  const a = await h.startAgent("east", ports.agent);
  await a.proc.kill("SIGKILL");
}

async function metric(name: string, labels: string): Promise<number> {
  const { body } = await httpGet(`http://127.0.0.1:${ports.health}/metrics`);
  const prefix = labels === "" ? `${name} ` : `${name}{${labels}}`;
  const line = body.split("\n").find((l) => l.startsWith(prefix));
  return line ? Number(line.split(" ").pop()) : 0;
}

async function baselines(): Promise<{ server: Footprint; agent: Footprint }> {
  return { server: await footprint(server.child.pid!), agent: await footprint(agent.proc.child.pid!) };
}

async function backToBaseline(base: { server: Footprint; agent: Footprint }): Promise<string> {
  const s = await waitForBaseline(server.child.pid!, base.server, "server", { timeoutMs: 60_000 });
  const a = await waitForBaseline(agent.proc.child.pid!, base.agent, "agent", { timeoutMs: 60_000 });
  return `server fds ${base.server.fds} -> ${s.fds}, RSS ${base.server.rssMiB.toFixed(0)} -> ${s.rssMiB.toFixed(0)} MiB; agent fds ${base.agent.fds} -> ${a.fds}`;
}

describe("hostile clients: admission (silent, slow and half-open peers)", () => {
  before(async () => {
    h = await new Harness().init(["east"]);
    tlsOpts = h.clientTls();
    const echo = net.createServer((s) => {
      echoSockets.add(s);
      s.once("close", () => echoSockets.delete(s));
      s.on("error", () => undefined);
      s.pipe(s);
    });
    echo.listen(0, "127.0.0.1");
    await once(echo, "listening");
    echoPort = (echo.address() as net.AddressInfo).port;
    h.onClose(() => {
      for (const s of echoSockets) s.destroy();
      echo.close();
    });
    ({ proc: server, ports } = await h.startServer([
      // Long enough that the silent attack stays in place while the legitimate clients connect:
      // they get through because silent peers hold no slot, not because the peers were closed.
      "--client-hello-timeout=60s",
      "--max-connections-awaiting-hello=2500",
      "--max-handshakes-per-source=400",
      "--http-connect-header-timeout=3s",
      "--tcp-keepalive=1s",
      // Every address, for the half-open test's client in its own namespace.
      "--http-connect-bind-address=0.0.0.0",
    ]));
    agent = await h.startAgent("east", ports.agent, ["--tcp-keepalive=1s"]);
    client = new TunnelClient({ proxy: { host: "127.0.0.1", port: ports.server, ...tlsOpts }, dialTimeoutMs: 10_000 });
    await waitFor("a first dial", async () => {
      await legitConnect();
      return true;
    });
  });
  after(async () => {
    await client?.close();
    await h?.close();
  });

  for (const door of ["server", "httpConnect", "agent"] as const) {
    test(`${SILENT.toLocaleString("en")} silent connections on the ${door} port: a CONNECT dial, a gRPC dial and a new agent get through within seconds`, async (t) => {
      const base = await baselines();
      const port = ports[door];
      const label = door === "server" ? "server-port" : door === "agent" ? "agent-port" : "http-connect-port";
      const evictedBefore = await metric(
        "cluster_proxy_server_connections_refused_total",
        `port="${label}",reason="hello_limit"`,
      );
      const attack = await openConnections(port, SILENT);
      try {
        const connectMs = await timed("a CONNECT dial", legitConnect);
        const grpcMs = await timed("a gRPC dial", legitGrpc);
        const agentMs = await timed("a new agent", legitAgent);
        const open = attack.filter((s) => !s.destroyed).length;
        const evicted =
          (await metric("cluster_proxy_server_connections_refused_total", `port="${label}",reason="hello_limit"`)) -
          evictedBefore;
        t.diagnostic(
          `${SILENT} silent connections on --${label} (${open} still open, ${evicted} oldest closed by --max-connections-awaiting-hello): CONNECT dial ${connectMs} ms, gRPC dial ${grpcMs} ms, new agent ready ${agentMs} ms`,
        );
        assert.ok(evicted >= SILENT - 2_500, `the oldest silent connections beyond the limit were closed (${evicted})`);
      } finally {
        for (const s of attack) s.destroy();
      }
      t.diagnostic(await backToBaseline(base));
    });
  }

  test(`${STALLED} connections that send a ClientHello and stall, from one address: a new agent from another address gets a turn within seconds; the address is capped`, async (t) => {
    const base = await baselines();
    const hello = await captureClientHello();
    const attack = await openConnections(ports.agent, STALLED, 1);
    for (const s of attack) s.write(hello);
    try {
      await waitFor(
        "the stalled handshakes to fill the queue",
        async () => (await metric("cluster_proxy_server_tls_handshakes_waiting", `port="agent-port"`)) > 100,
        WITHIN_MS,
      );
      const agentMs = await timed("a new agent", legitAgent);
      const connectMs = await timed("a CONNECT dial", legitConnect);
      const capped = await metric(
        "cluster_proxy_server_connections_refused_total",
        `port="agent-port",reason="source_limit"`,
      );
      t.diagnostic(
        `${STALLED} stalled ClientHellos from 127.0.0.2 on --agent-port: new agent ready ${agentMs} ms, CONNECT dial ${connectMs} ms; ${capped} refused by --max-handshakes-per-source=400`,
      );
      assert.ok(capped >= STALLED - 400, `connections beyond the per-source limit were refused (${capped})`);
    } finally {
      for (const s of attack) s.destroy();
    }
    t.diagnostic(await backToBaseline(base));
  });

  test(`${TRICKLED} CONNECT heads trickled a byte at a time are closed at the absolute header deadline`, async (t) => {
    const base = await baselines();
    const head = Buffer.from(
      `CONNECT 127.0.0.1.east:${echoPort} HTTP/1.1\r\nHost: x\r\nX-Pad: ${"a".repeat(200)}\r\n\r\n`,
    );
    const sockets = await Promise.all(
      Array.from(
        { length: TRICKLED },
        (_, i) =>
          new Promise<tls.TLSSocket>((resolve, reject) => {
            const s = tls.connect({
              socket: net.connect({
                port: ports.httpConnect,
                host: "127.0.0.1",
                localAddress: `127.0.0.${2 + (i % ATTACK_SOURCES)}`,
              }),
              servername: "localhost",
              ...tlsOpts,
            });
            s.once("secureConnect", () => resolve(s));
            s.once("error", reject);
          }),
      ),
    );
    const started = Date.now();
    const answers: string[] = [];
    const closedAt: number[] = [];
    for (const s of sockets) {
      s.on("error", () => undefined);
      s.on("data", (d: Buffer) => answers.push(d.toString("latin1").split("\r\n")[0]!));
      s.once("close", () => closedAt.push(Date.now() - started));
    }
    // A byte every 200 ms each (10 s of head at this rate), bounded by the head's length.
    let sent = 0;
    const trickle = setInterval(() => {
      for (const s of sockets) if (!s.destroyed) s.write(head.subarray(sent, sent + 1));
      sent = Math.min(sent + 1, head.length - 1);
    }, 200);
    try {
      await waitFor("every trickled head to be closed", () => closedAt.length === TRICKLED, 30_000, 200);
    } finally {
      clearInterval(trickle);
      for (const s of sockets) s.destroy();
    }
    const last = Math.max(...closedAt);
    t.diagnostic(
      `${TRICKLED} trickled heads (a byte per 200 ms each): all closed by ${last} ms with --http-connect-header-timeout=3s; answers: ${[...new Set(answers)].join(", ")}`,
    );
    assert.ok(sent < head.length - 1, "the heads were still trickling when they were closed");
    assert.ok(answers.every((a) => a === "HTTP/1.1 408 Request Timeout"));
    t.diagnostic(await backToBaseline(base));
  });

  test(
    "a CONNECT client that vanishes without a FIN: TCP keepalive closes its socket, the tunnel and the target socket; the agent's sockets carry keepalive too",
    { skip: blackholePrerequisite.skip },
    async (t) => {
      failIfMissing(blackholePrerequisite.missing);
      const ns = new PeerNamespace("h", "10.203.0");
      let peer: Proc | undefined;
      try {
        const before = new Set(echoSockets);
        const { cmd, args } = ns.exec([process.execPath, "--input-type=module", "-e", HALF_OPEN_CLIENT]);
        peer = h.spawnProc("half-open client", cmd, args, {
          env: {
            ...process.env,
            HO_HOST: ns.hostAddress,
            HO_PORT: String(ports.httpConnect),
            HO_CA: h.certs.ca.cert,
            HO_CERT: h.certs.client.cert,
            HO_KEY: h.certs.client.key,
            HO_TARGET: `127.0.0.1.east:${echoPort}`,
          },
        });
        const proc = peer;
        await waitFor(
          "the client in the namespace to tunnel an echo",
          () => proc.output().includes("ready"),
          WITHIN_MS,
        );
        const target = [...echoSockets].find((s) => !before.has(s));
        assert.ok(target, "the agent opened a target socket for the client");
        // Keepalive on every long-lived socket: the server's side of the client's connection, the
        // agent's connection to the server and its endpoint socket. ss shows one timer per socket,
        // and a socket with data not yet acknowledged shows its retransmission timer instead: each
        // is read until the socket is idle and its keepalive timer shows (bounded).
        const keepalive = (what: string, filter: string): Promise<void> =>
          waitFor(what, () => sockets(filter).some((l) => l.includes("timer:(keepalive")), 10_000, 100);
        await keepalive("server: the CONNECT socket", `( sport = :${ports.httpConnect} and dst ${ns.peerAddress} )`);
        await keepalive("agent: its connection to the server", `( dport = :${ports.agent} )`);
        await keepalive("agent: its endpoint socket", `( dport = :${echoPort} and sport = :${target.remotePort} )`);
        const targetClosed = new Promise<void>((resolve) => target.once("close", () => resolve()));
        // The client's namespace now drops everything, silently: no FIN, no RST, no ICMP.
        const cutAt = Date.now();
        ns.blackhole();
        await timedOut(targetClosed, 60_000, "the target socket to close after the client vanished");
        const noticedMs = Date.now() - cutAt;
        await waitFor(
          "the server to drop the CONNECT connection",
          async () => (await metric("konnectivity_network_proxy_server_http_connections", "")) === 0,
          WITHIN_MS,
        );
        t.diagnostic(
          `a CONNECT client cut off without a FIN (--tcp-keepalive=1s): its tunnel and target socket closed ${noticedMs} ms later`,
        );
      } finally {
        await peer?.kill("SIGKILL");
        ns.close();
      }
    },
  );
});

/** Resolve when `p` does, fail after `ms` naming `what`. */
async function timedOut(p: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      p,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

describe("wrong protocols are answered at once", () => {
  /** Each mistake must be answered within this. */
  const ANSWER_MS = 2_000;
  let w: Harness;
  let plain: ServerPorts;
  let udsConnect: string;
  let wtls: { ca: Buffer; cert: Buffer; key: Buffer };

  before(async () => {
    w = await new Harness().init(["east"]);
    udsConnect = `${w.dir}/connect.sock`;
    wtls = {
      ca: readFileSync(w.certs.ca.cert),
      cert: readFileSync(w.certs.client.cert),
      key: readFileSync(w.certs.client.key),
    };
    // A plain CONNECT port on loopback (and a plain CONNECT Unix socket) beside the TLS ports.
    ({ ports: plain } = await w.startServer(["--http-connect-plain", `--http-connect-uds-name=${udsConnect}`]));
  });
  after(() => w?.close());

  /** How long `action` took to settle, and its error (it must fail). */
  async function failure(action: () => Promise<unknown>): Promise<{ ms: number; message: string }> {
    const started = Date.now();
    const message = await action().then(
      () => assert.fail("the attempt must fail"),
      (err: Error) => err.message,
    );
    return { ms: Date.now() - started, message };
  }

  test("TLS to the plain CONNECT port: curl and the SDK fail at once, saying it is not TLS", async (t) => {
    const sdk = await failure(async () => {
      const c = new TunnelClient({
        proxy: { host: "127.0.0.1", port: plain.httpConnect, ...wtls },
        dialTimeoutMs: 30_000,
      });
      try {
        await c.dial("127.0.0.1.east:1");
      } finally {
        await c.close();
      }
    });
    t.diagnostic(`SDK (gRPC over TLS) to the plain CONNECT port: ${sdk.ms} ms: ${sdk.message}`);
    assert.ok(sdk.ms < ANSWER_MS, `answered in ${sdk.ms} ms`);
    assert.match(sdk.message, /wrong port or protocol.*did not answer with TLS/);
    if (spawnSync("sh", ["-c", "command -v curl"]).status === 0) {
      const started = Date.now();
      const r = spawnSync(
        "curl",
        ["-sS", "--max-time", "30", "--proxy-insecure", "-x", `https://127.0.0.1:${plain.httpConnect}`, "http://x/"],
        { encoding: "utf8", timeout: 40_000 },
      );
      const ms = Date.now() - started;
      t.diagnostic(`curl -x https:// to the plain CONNECT port: ${ms} ms: ${r.stderr.trim()}`);
      assert.ok(ms < ANSWER_MS, `curl answered in ${ms} ms`);
      assert.match(r.stderr, /wrong version number|SSL|TLS/i);
    }
  });

  test("plain HTTP to each TLS port: 400 'this port speaks TLS' at once", async (t) => {
    // The HTTP CONNECT door over mTLS (the chart's 8093) on a server of its own.
    const { ports: mtls } = await w.startServer([]);
    for (const [flag, port] of [
      ["--server-port", plain.server],
      ["--agent-port", plain.agent],
      ["--http-connect-port", mtls.httpConnect],
    ] as const) {
      const started = Date.now();
      const answer = await httpGet(`http://127.0.0.1:${port}/`);
      const ms = Date.now() - started;
      t.diagnostic(`plain HTTP to ${flag}: ${answer.status} in ${ms} ms: ${answer.body.trim()}`);
      assert.equal(answer.status, 400);
      assert.match(
        answer.body,
        new RegExp(`Client sent an HTTP request to an HTTPS server: this port \\(${flag}\\) speaks TLS`),
      );
      assert.ok(ms < ANSWER_MS, `answered in ${ms} ms`);
    }
  });

  test("the SDK's gRPC to an HTTP/1 port fails at once, saying what answered", async (t) => {
    // The CONNECT door on its Unix socket answers the HTTP/2 preface in HTTP/1.
    const uds = await failure(async () => {
      const c = new TunnelClient({ proxy: { udsPath: udsConnect }, dialTimeoutMs: 30_000 });
      try {
        await c.dial("127.0.0.1.east:1");
      } finally {
        await c.close();
      }
    });
    t.diagnostic(`SDK (gRPC) to the CONNECT Unix socket: ${uds.ms} ms: ${uds.message}`);
    assert.ok(uds.ms < ANSWER_MS, `answered in ${uds.ms} ms`);
    assert.match(uds.message, /answered in HTTP\/1 \("HTTP\/1\.1 4\d\d/);
    // An HTTPS server that speaks HTTP/1 only (no ALPN).
    const web = https.createServer(
      { cert: readFileSync(w.certs.server.cert), key: readFileSync(w.certs.server.key) },
      (_req, res) => res.end("hello"),
    );
    web.listen(0, "127.0.0.1");
    await once(web, "listening");
    try {
      const port = (web.address() as net.AddressInfo).port;
      const httpsOne = await failure(async () => {
        const c = new TunnelClient({ proxy: { host: "127.0.0.1", port, ...wtls }, dialTimeoutMs: 30_000 });
        try {
          await c.dial("127.0.0.1.east:1");
        } finally {
          await c.close();
        }
      });
      t.diagnostic(`SDK (gRPC over TLS) to an HTTPS/1.1 server: ${httpsOne.ms} ms: ${httpsOne.message}`);
      assert.ok(httpsOne.ms < ANSWER_MS, `answered in ${httpsOne.ms} ms`);
      assert.match(httpsOne.message, /wrong port or protocol/);
    } finally {
      web.closeAllConnections();
      web.close();
    }
  });
});
