/**
 * Per-connection flow control end to end (docs/design/flow-control.md), real processes on loopback.
 * Through one agent, stalled neighbours (a client that never reads, over gRPC and over HTTP
 * CONNECT, and a target that never reads) must not slow a healthy connection moving 128 MiB
 * each way; server and agent memory stay bounded; each stalled connection is closed with the
 * stall error after --connection-stall-timeout. Then the same against the Go proxy-agent, which
 * ignores FLOW_PAUSE: the server falls back to holding the agent stream, and the stall timeout
 * frees it.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type * as net from "node:net";
import { TunnelClient, dialConnect, type TunnelSocket } from "@cluster-proxy/client";
import { startGoAgent } from "../framework/go-harness.js";
import { Harness, PatternStream, listenOnLoopback, transferServer } from "../framework/harness.js";
import { waitFor } from "../framework/waits.js";
import { type Proc } from "../framework/process.js";

const MiB = 1024 * 1024;
const STALL_MS = 10_000;
const debug = (what: string): void => {
  if (process.env["FC_DEBUG"]) process.stderr.write(`[fc ${new Date().toISOString()}] ${what}\n`);
};
/** RSS ceiling for a server or agent while neighbours are stalled (idle is ~70-90 MiB). */
const RSS_LIMIT = 400 * MiB;

function rss(proc: Proc): number {
  if (proc.child.exitCode !== null || proc.child.signalCode !== null) {
    throw new Error(
      `${proc.name} exited (${proc.child.exitCode ?? proc.child.signalCode}):\n${proc.output().slice(-4000)}`,
    );
  }
  const status = readFileSync(`/proc/${proc.child.pid}/status`, "utf8");
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) * 1024 : 0;
}

/** Track the highest RSS of `procs` every 100 ms until stopped. */
function watchRss(procs: Proc[]): { stop: () => number[] } {
  const max = procs.map(() => 0);
  const timer = setInterval(() => procs.forEach((p, i) => (max[i] = Math.max(max[i] ?? 0, rss(p)))), 100);
  return {
    stop: () => {
      clearInterval(timer);
      return max;
    },
  };
}

/** A target that accepts and never reads. */
async function deafTarget(h: Harness): Promise<number> {
  const net = await import("node:net");
  const srv = net.createServer({ pauseOnConnect: true }, (s) => {
    s.on("error", () => undefined);
  });
  return listenOnLoopback(h, srv);
}

/**
 * A transfer size (whole MiB, 8 MiB to 128 MiB) that takes about `ms` at `mbPerSecond`: what fits
 * a time window on this machine, however busy it is.
 */
function healthySize(mbPerSecond: number, ms: number): number {
  return Math.min(128, Math.max(8, Math.floor((mbPerSecond * ms) / 1000))) * MiB;
}

/** Whether `p` has settled yet (fulfilled or rejected), asked later. */
function settled(p: Promise<unknown>): () => boolean {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  return () => done;
}

function expectedHash(size: number, seed: number): string {
  const gen = new PatternStream(seed);
  const h = createHash("sha256");
  for (let n = 0; n < size; n += MiB) h.update(gen.next(Math.min(MiB, size - n)));
  return h.digest("hex");
}

/** Download `size` bytes from the transfer target; resolves with MB/s after checking the hash. */
async function download(s: TunnelSocket | net.Socket, size: number, seed: number, want: string): Promise<number> {
  const h = createHash("sha256");
  let n = 0;
  const started = performance.now();
  const done = new Promise<void>((resolve, reject) => {
    s.on("data", (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    s.once("end", () => resolve());
    s.once("error", reject);
  });
  s.write(`source ${size} ${seed}\n`);
  await done;
  const secs = (performance.now() - started) / 1000;
  assert.deepEqual({ hash: h.digest("hex"), n }, { hash: want, n: size }, "download byte-exact");
  return size / MiB / secs;
}

/** Upload `size` bytes to the transfer target; resolves with MB/s after the target confirms the hash. */
async function upload(s: TunnelSocket, size: number, seed: number): Promise<number> {
  let line = "";
  const answer = new Promise<string>((resolve, reject) => {
    s.on("data", (c: Buffer) => {
      line += c.toString();
      if (line.includes("\n")) resolve(line.trim());
    });
    s.once("error", reject);
  });
  const started = performance.now();
  s.write(`sink ${size}\n`);
  const gen = new PatternStream(seed);
  const hash = createHash("sha256");
  for (let sent = 0; sent < size;) {
    const chunk = gen.next(Math.min(MiB, size - sent));
    hash.update(chunk);
    sent += chunk.length;
    if (!s.write(chunk)) await once(s, "drain");
  }
  assert.equal(await answer, `${hash.digest("hex")} ${size}`, "upload byte-exact");
  return size / MiB / ((performance.now() - started) / 1000);
}

/** Stall lines the server logged so far. */
function serverStalls(server: Proc): number {
  return server.output().split("connection stalled: the client read nothing").length - 1;
}

/**
 * A paused CONNECT client cannot see its socket end until it reads: wait until the server logs
 * one more stall close (resolving with the time), then read and expect the end well before the
 * bytes asked for.
 */
async function connectStallEnd(server: Proc, before: number, s: net.Socket, asked: number): Promise<number> {
  await waitFor("the server's stall close", () => serverStalls(server) > before, 3 * STALL_MS + 15_000, 100);
  const at = Date.now();
  let n = 0;
  s.on("data", (c: Buffer) => (n += c.length));
  const end = ending(s);
  s.resume();
  await end;
  assert.ok(n < asked, `the stalled CONNECT client got ${n} of ${asked} bytes, then the end`);
  return at;
}

/** When `s` ended (error or close), with the error if any. */
function ending(s: TunnelSocket | net.Socket): Promise<{ at: number; error: string }> {
  return new Promise((resolve) => {
    let error = "";
    s.on("error", (e: Error) => (error ||= e.message));
    s.once("close", () => resolve({ at: Date.now(), error }));
  });
}

describe("per-connection flow control: stalled neighbours do not slow a healthy connection", () => {
  const h = new Harness();
  let client: TunnelClient;
  let tlsOpts: { ca: Buffer; cert: Buffer; key: Buffer };
  let transferPort = 0;
  let deafPort = 0;
  let server: Proc;
  let connectPort = 0;
  let serverPorts: { agent: number };
  const cleanups: (() => void)[] = [];
  /** Seeds of the `source` transfers whose writes the target had to hold back (see serveTransfer). */
  const blockedSources = new Set<number>();

  before(async () => {
    await h.init(["east"]);
    transferPort = await transferServer(h, (seed) => blockedSources.add(seed));
    deafPort = await deafTarget(h);
    const srv = await h.startServer([`--connection-stall-timeout=${STALL_MS}ms`]);
    server = srv.proc;
    connectPort = srv.ports.httpConnect;
    serverPorts = srv.ports;
    tlsOpts = h.clientTls();
    client = new TunnelClient({
      proxy: { host: "127.0.0.1", port: srv.ports.server, ...tlsOpts },
      dialTimeoutMs: 10_000,
    });
  });
  after(async () => {
    for (const c of cleanups) c();
    await client?.close();
    await h.close();
  });

  test(
    "ours: 128 MiB each way at near-solo rate beside three stalled connections, which are closed after the stall timeout",
    { timeout: 90_000 },
    async () => {
      const agent = await h.startAgent("east", serverPorts.agent, [`--connection-stall-timeout=${STALL_MS}ms`]);
      const target = `127.0.0.1.east:${transferPort}`;
      const size = 128 * MiB;
      const want = expectedHash(size, 3);

      const soloDown = await download(await client.dial(target), size, 3, want);
      debug(`solo down ${soloDown}`);
      const soloUp = await upload(await client.dial(target), size, 4);
      debug(`solo up ${soloUp}`);

      const rssWatch = watchRss([server, agent.proc]);
      // A1: a gRPC client that never reads a 4 GiB download.
      const a1 = await client.dial(target);
      a1.pause();
      debug("A1 dialled");
      const a1End = ending(a1);
      const a1Ended = settled(a1End);
      a1.write(`source ${4096 * MiB} 9\n`);
      // A2: an HTTP CONNECT client that never reads a 4 GiB download.
      const a2 = await dialConnect(target, { proxy: { host: "127.0.0.1", port: connectPort, ...tlsOpts } });
      a2.pause();
      debug("A2 dialled");
      const stallsBefore = serverStalls(server);
      const a2End = connectStallEnd(server, stallsBefore + 1, a2, 4096 * MiB).then((at) => ({ at, error: "" }));
      const a2Ended = settled(a2End);
      a2.write(`source ${4096 * MiB} 10\n`);
      // A3: a target that never reads what a client keeps writing.
      const a3 = await client.dial(`127.0.0.1.east:${deafPort}`);
      const a3End = ending(a3);
      const a3Ended = settled(a3End);
      debug("A3 dialled");
      const junk = Buffer.alloc(MiB, 5);
      let a3Writing = true;
      const writeA3 = (): void => {
        while (a3Writing && !a3.destroyed && a3.write(junk));
        if (a3Writing && !a3.destroyed) a3.once("drain", writeA3);
      };
      a3.on("close", () => (a3Writing = false));
      cleanups.push(() => (a3Writing = false));
      writeA3();
      const stalledAt = Date.now();
      // All three over their budgets: A1's and A2's downloads held back at the target, A3's writes
      // held back at the client.
      await waitFor(
        "A1, A2 and A3 held back by flow control",
        () => blockedSources.has(9) && blockedSources.has(10) && a3.writableNeedDrain,
        15_000,
        10,
      );

      // The healthy transfers must run while the neighbours are stalled (before the stall timeout
      // closes them), on a busy machine too: sized so that at the solo rates both together take an
      // eighth of the stall timeout, at the 0.25x floor asserted below half of it.
      const healthy = healthySize(Math.min(soloDown, soloUp), STALL_MS / 16);
      const healthyWant = healthy === size ? want : expectedHash(healthy, 3);
      const down = await download(await client.dial(target), healthy, 3, healthyWant);
      debug(`down ${down} (${healthy / MiB} MiB)`);
      const up = await upload(await client.dial(target), healthy, 4);
      debug(`up ${up}`);
      const healthyDoneAt = Date.now();
      const stillStalled = [a1Ended, a2Ended, a3Ended].map((ended) => !ended());
      for (const [i, e] of [a1End, a2End, a3End].entries())
        void e.then(
          (r) => debug(`A${i + 1} ended ${JSON.stringify(r)}`),
          () => undefined,
        );

      const ends = await Promise.all([a1End, a2End, a3End]);
      a3Writing = false;
      const [serverRss, agentRss] = rssWatch.stop();
      const report = {
        soloDown: Math.round(soloDown),
        down: Math.round(down),
        soloUp: Math.round(soloUp),
        healthyMiB: healthy / MiB,
        up: Math.round(up),
        serverRssMiB: Math.round((serverRss ?? 0) / MiB),
        agentRssMiB: Math.round((agentRss ?? 0) / MiB),
        closedAfterMs: ends.map((e) => e.at - stalledAt),
        errors: ends.map((e) => e.error),
      };
      process.stderr.write(`flow-control (ours): ${JSON.stringify(report)}\n`);

      assert.deepEqual(
        stillStalled,
        [true, true, true],
        `the healthy transfers ran while the neighbours were stalled (done ${healthyDoneAt - stalledAt} ms after)`,
      );
      assert.ok(down >= soloDown * 0.25, `download ${down.toFixed(0)} MB/s vs solo ${soloDown.toFixed(0)} MB/s`);
      assert.ok(up >= soloUp * 0.25, `upload ${up.toFixed(0)} MB/s vs solo ${soloUp.toFixed(0)} MB/s`);
      assert.ok((serverRss ?? 0) < RSS_LIMIT, `server RSS ${report.serverRssMiB} MiB`);
      assert.ok((agentRss ?? 0) < RSS_LIMIT, `agent RSS ${report.agentRssMiB} MiB`);
      // A reader's HTTP/2 window (16 MiB) counts as progress: a gRPC reader may get one more round.
      for (const [i, e] of ends.entries()) {
        const after = e.at - stalledAt;
        assert.ok(after >= STALL_MS - 1500 && after <= 2 * STALL_MS + 15_000, `A${i + 1} closed after ${after} ms`);
      }
      assert.match(ends[0]?.error ?? "", /./, "the gRPC client sees an error, not a clean end");
      assert.match(ends[2]?.error ?? "", /connection stalled: the endpoint read nothing/);
      assert.equal(
        serverStalls(server),
        stallsBefore + 2,
        "both stalled clients (gRPC and CONNECT) closed by the server",
      );
      assert.match(server.output(), /connection stalled: the client read nothing for 10s/);
      assert.match(agent.proc.output(), /connection stalled: the endpoint read nothing for 10s/);
      await agent.proc.kill();
    },
  );

  test(
    "Go agent (ignores FLOW_PAUSE): the server holds the stream past the limit, the stall timeout frees it; memory bounded",
    { timeout: 90_000 },
    async () => {
      const goAgent = await startGoAgent(h, serverPorts.agent, { cluster: "east", identifiers: "host=east" });
      await waitFor("the Go agent serves east", async () => {
        const s = await client.dial(`127.0.0.1.east:${transferPort}`);
        s.destroy();
        return true;
      });
      const target = `127.0.0.1.east:${transferPort}`;
      const size = 64 * MiB;
      const want = expectedHash(size, 5);
      const rssWatch = watchRss([server, goAgent.proc]);
      const a = await dialConnect(target, { proxy: { host: "127.0.0.1", port: connectPort, ...tlsOpts } });
      a.pause();
      const aEnd = connectStallEnd(server, serverStalls(server), a, 4096 * MiB).then((at) => ({ at }));
      a.write(`source ${4096 * MiB} 12\n`);
      const stalledAt = Date.now();
      // The stalled download held back at the target: the server holds the Go agent's stream.
      await waitFor("the stalled download held back", () => blockedSources.has(12), 15_000, 10);
      const rate = await download(await client.dial(target), size, 5, want);
      const end = await aEnd;
      const [serverRss, agentRss] = rssWatch.stop();
      process.stderr.write(
        `flow-control (Go agent): ${JSON.stringify({ rate: Math.round(rate), closedAfterMs: end.at - stalledAt, serverRssMiB: Math.round((serverRss ?? 0) / MiB), goAgentRssMiB: Math.round((agentRss ?? 0) / MiB) })}\n`,
      );
      assert.ok(end.at - stalledAt >= STALL_MS - 1500 && end.at - stalledAt <= 2 * STALL_MS + 15_000);
      assert.ok((serverRss ?? 0) < RSS_LIMIT, `server RSS ${Math.round((serverRss ?? 0) / MiB)} MiB`);
      assert.match(server.output(), /connection stalled: the client read nothing/);
      await goAgent.kill();
    },
  );
});
