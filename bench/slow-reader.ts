/**
 * Slow-reader benchmark (issue 5): the download rate of a healthy tunnelled connection alone and
 * beside a stalled neighbour (a client that never reads a 4 GiB download) through the same
 * agent. Ours (our server + our agent) and Go (Go proxy-server + Go proxy-agent) side by side,
 * median of RUNS runs (default 3), ratio stalled/solo. A healthy download that does not finish
 * within HEALTHY_TIMEOUT_S (default 20 s) counts as 0 MB/s (blocked). Prints a table and writes
 * bench/results/slow-reader.json. Needs `npm run build` (the CLI) and the Go peers
 * (`node scripts/go-peers.mjs`). Run: npm run slow-reader (in bench/).
 */
import { createHash } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { TunnelClient, type TunnelSocket } from "@cluster-proxy/client";
import { Harness, PatternStream, transferServer } from "../test/framework/harness.js";
import {
  startGoAgent,
  startGoServer,
  startTsAgent,
  startTsServer,
  type ServerCtl,
} from "../test/framework/go-harness.js";

const MiB = 1024 * 1024;
const SIZE = Number(process.env["SIZE_MIB"] ?? 128) * MiB;
const RUNS = Number(process.env["RUNS"] ?? 3);
const HEALTHY_TIMEOUT_MS = Number(process.env["HEALTHY_TIMEOUT_S"] ?? 20) * 1000;

function expected(size: number, seed: number): string {
  const gen = new PatternStream(seed);
  const h = createHash("sha256");
  for (let n = 0; n < size; n += MiB) h.update(gen.next(Math.min(MiB, size - n)));
  return h.digest("hex");
}

/** MB/s of one download, or 0 when it did not finish in time; throws when bytes differ. */
async function download(s: TunnelSocket, seed: number, want: string): Promise<number> {
  const h = createHash("sha256");
  let n = 0;
  const started = performance.now();
  const result = await new Promise<"done" | "timeout">((resolve, reject) => {
    const timer = setTimeout(() => resolve("timeout"), HEALTHY_TIMEOUT_MS);
    s.on("data", (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    s.once("end", () => {
      clearTimeout(timer);
      resolve("done");
    });
    s.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    s.write(`source ${SIZE} ${seed}\n`);
  });
  s.destroy();
  if (result === "timeout") return 0;
  if (n !== SIZE || h.digest("hex") !== want) throw new Error(`download not byte-exact (${n} bytes)`);
  return SIZE / MiB / ((performance.now() - started) / 1000);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}

interface SideResult {
  soloMBps: number[];
  stalledMBps: number[];
  soloMedian: number;
  stalledMedian: number;
  ratio: number;
}

async function side(kind: "ours" | "go"): Promise<SideResult> {
  const h = await new Harness().init(["east"]);
  try {
    const transferPort = await transferServer(h);
    let server: ServerCtl;
    if (kind === "ours") {
      server = await startTsServer(h, ["--agent-identity=shared"]);
      await startTsAgent(h, server.agentPort, { cluster: "east", identifiers: "host=127.0.0.1" });
    } else {
      server = await startGoServer(h);
      await startGoAgent(h, server.agentPort, { cluster: "east", identifiers: "host=127.0.0.1" });
    }
    const tlsOpts = {
      ca: readFileSync(h.certs.ca.cert),
      cert: readFileSync(h.certs.client.cert),
      key: readFileSync(h.certs.client.key),
    };
    // One client (one HTTP/2 session) per dial: the Go server's single-use tunnels, ours alike.
    const clients: TunnelClient[] = [];
    const dial = async (): Promise<TunnelSocket> => {
      const c = new TunnelClient({
        proxy: { host: "127.0.0.1", port: server.grpcPort, ...tlsOpts },
        dialTimeoutMs: 10_000,
      });
      clients.push(c);
      return c.dial(`127.0.0.1:${transferPort}`);
    };
    const want = expected(SIZE, 3);
    const out: SideResult = { soloMBps: [], stalledMBps: [], soloMedian: 0, stalledMedian: 0, ratio: 0 };
    for (let run = 0; run < RUNS; run++) {
      out.soloMBps.push(await download(await dial(), 3, want));
      const stalled = await dial();
      stalled.pause();
      stalled.on("error", () => undefined);
      stalled.write(`source ${4096 * MiB} 9\n`);
      await new Promise((r) => setTimeout(r, 1500)); // the neighbour is over every budget now
      // A dial that times out behind the stalled neighbour counts as blocked (0 MB/s).
      out.stalledMBps.push(
        await dial()
          .then((s) => download(s, 3, want))
          .catch(() => 0),
      );
      stalled.destroy();
      process.stderr.write(
        `${kind} run ${run + 1}: solo ${out.soloMBps.at(-1)?.toFixed(0)} MB/s, beside a stalled reader ${out.stalledMBps.at(-1)?.toFixed(0)} MB/s\n`,
      );
      if (kind === "go" && out.stalledMBps.at(-1) === 0) {
        // The Go agent stays blocked for good: further runs would measure nothing new.
        for (const c of clients) await c.close();
        clients.length = 0;
        break;
      }
    }
    for (const c of clients) await c.close();
    out.soloMedian = median(out.soloMBps);
    out.stalledMedian = median(out.stalledMBps);
    out.ratio = out.soloMedian > 0 ? out.stalledMedian / out.soloMedian : 0;
    return out;
  } finally {
    await h.close();
  }
}

const ours = await side("ours");
const go = await side("go");
const fmt = (n: number): string => n.toFixed(0).padStart(6);
process.stdout.write(
  [
    `slow reader: healthy ${SIZE / MiB} MiB download, alone and beside a client that never reads (median of ${RUNS})`,
    `side   solo MB/s   stalled-neighbour MB/s   ratio`,
    `ours   ${fmt(ours.soloMedian)}      ${fmt(ours.stalledMedian)}                  ${ours.ratio.toFixed(2)}`,
    `go     ${fmt(go.soloMedian)}      ${fmt(go.stalledMedian)}                  ${go.ratio.toFixed(2)}`,
    `(0 MB/s = the healthy download did not finish within ${HEALTHY_TIMEOUT_MS / 1000} s: head-of-line blocked)`,
    "",
  ].join("\n"),
);
const dir = join(import.meta.dirname, "results");
await mkdir(dir, { recursive: true });
await writeFile(
  join(dir, "slow-reader.json"),
  JSON.stringify(
    {
      date: new Date().toISOString(),
      sizeMiB: SIZE / MiB,
      runs: RUNS,
      healthyTimeoutS: HEALTHY_TIMEOUT_MS / 1000,
      ours,
      go,
    },
    null,
    2,
  ) + "\n",
);
