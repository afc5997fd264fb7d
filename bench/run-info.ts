/**
 * What a benchmark run ran on, recorded in its results: the machine and the Node.js runtime (the
 * version the run's processes had, our processes' V8 flags, and the version the image ships,
 * which `npm --prefix bench run <script>` starts).
 */
import { readFileSync } from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { REPO } from "./lib.js";

/** The Node.js the run's processes ran on (every node process of ours starts with process.execPath). */
export interface Runtime {
  /** process.version */
  node: string;
  /** The V8 flags our server and agent ran with (nodeFlagsFor that version). */
  nodeFlags: string[];
  /** The version the container image ships (image/versions.json), which the bench should run on. */
  image: string;
}

/**
 * The node this run is on, its flags, and the one the image ships; `warn` is told when they
 * differ (the run is then not on the shipped runtime).
 */
export function currentRuntime(warn: (message: string) => void): Runtime {
  const image = (
    JSON.parse(readFileSync(join(REPO, "image", "versions.json"), "utf8")) as { node: { version: string } }
  ).node.version;
  if (process.version !== `v${image}`) {
    warn(`warning: running on node ${process.version}, the image ships ${image} (npm run bench runs on it)`);
  }
  return { node: process.version, nodeFlags: [...NODE_FLAGS], image };
}

/** The machine: cores, CPU model, memory, node, kernel, then `extra`, the load average and the date. */
export function machineInfo(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model ?? "",
    memory_gib: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    kernel: os.release(),
    ...extra,
    load_average_at_start: os.loadavg().map((x) => Math.round(x * 100) / 100),
    date: new Date().toISOString(),
  };
}
