/**
 * The Node.js flags a long-running cluster-proxy process (server, agent, up) should start with.
 * `cluster-proxy` passes them through its `#!` line; whoever starts `node .../main.js` directly
 * (a container command, a test harness, a benchmark) passes {@link NODE_FLAGS} before the script.
 *
 * `--initial-old-space-size=64`: a floor of 64 MiB under V8's old-generation limit. V8 counts
 * the ArrayBuffer memory allocated since the last full collection against that limit, and node
 * gives every TLS read of a tunnel (16 KiB) its own ArrayBuffer. A relay's live heap is ~10 MiB,
 * so V8 sets its limit ~16-24 MiB above it, and a bulk transfer crossed that every ~20 MiB: about
 * 50 full (mark-compact) collections per GB relayed, a third of the server's CPU (profile in
 * docs/decisions.md). With the floor the young ArrayBuffers are freed by scavenges before the
 * limit is reached: 0-1 full collections per GB, and the server spends ~1.0 instead of ~1.7
 * CPU-s per GB. The flag is not allowed in NODE_OPTIONS and V8 reads it only at start-up.
 *
 * `--max-semi-space-size=4`: V8's young generation may grow to 2 x 4 MiB instead of 2 x 16 MiB.
 * A burst of connections (1,000 agents connecting at once) grew it to the maximum, and node keeps
 * it until the process has idled for a while: ~30 KiB of server RSS per agent of the burst (104
 * -> 78 KiB per agent, Go: 74-76). The bulk relay costs the same CPU with it; dial churn costs the
 * server 14% more CPU per dial at the same dial rate (A/B in docs/decisions.md).
 */
export const NODE_FLAGS: readonly string[] = ["--initial-old-space-size=64", "--max-semi-space-size=4"];

/** The `#!` line of the `cluster-proxy` executable: `env -S` passes {@link NODE_FLAGS} to node. */
export const SHEBANG = `#!/usr/bin/env -S node ${NODE_FLAGS.join(" ")}`;

/** The flags of {@link NODE_FLAGS} this process was started without (by name). */
export function missingNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  const name = (flag: string): string => flag.split("=")[0]!.replaceAll("_", "-");
  const given = new Set(execArgv.map(name));
  return NODE_FLAGS.filter((flag) => !given.has(name(flag)));
}

/** Say at start-up (info) which of {@link NODE_FLAGS} this process runs without, and what it costs. */
export function logMissingNodeFlags(logger: { info(obj: object, msg: string): void }): void {
  const missing = missingNodeFlags();
  if (missing.length === 0) return;
  logger.info(
    { missing, run: `node ${NODE_FLAGS.join(" ")} <path to cluster-proxy's main.js> ...` },
    "node runs without cluster-proxy's V8 flags: bulk transfers cost up to 1.7x the CPU and connection bursts ~30 KiB more memory per connection (the `cluster-proxy` executable passes them itself)",
  );
}
