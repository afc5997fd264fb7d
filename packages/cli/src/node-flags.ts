/**
 * The Node.js flags a long-running process (server, agent, up) starts with, by Node major and
 * command ({@link nodeFlagsFor}, {@link NODE_FLAGS}); the agent restarts under its own
 * ({@link restartWithNodeFlags}). V8 reads them only at start-up; node refuses them in NODE_OPTIONS.
 * Design: docs/design/decisions.md#a-64-mib-floor-under-v8s-old-generation-limit---initial-old-space-size64
 */
const FLAGS_BEFORE_24: readonly string[] = ["--initial-old-space-size=64", "--max-semi-space-size=4"];
const FLAGS_FROM_24: readonly string[] = [
  "--external-memory-accounted-in-global-limit",
  "--initial-old-space-size=128",
  "--max-semi-space-size=4",
];

/**
 * What the agent's process runs with instead of the server's young generation: semi-spaces of
 * 1 MiB (V8's own floor), see the comment at the top.
 */
const AGENT_SEMI_SPACE = "--max-semi-space-size=1";

/** The commands whose processes get flags of their own ({@link nodeFlagsFor}). */
export const COMMANDS_WITH_OWN_FLAGS: readonly string[] = ["agent"];

/** The major of a Node.js version ("26.12.1", "v20.20.2"); NaN if it is not one. */
function majorOf(version: string): number {
  const m = /^v?(\d+)\./.exec(version);
  return m ? Number(m[1]) : NaN;
}

/**
 * The flags cluster-proxy's processes should run with on Node.js `version` ("26.12.1" or
 * "v26.12.1"); with `command` (the subcommand: `agent`, `server`, ...), those of that command's
 * process: the agent's young generation is smaller (see the top of this file).
 */
export function nodeFlagsFor(version: string, command?: string): readonly string[] {
  const major = majorOf(version);
  if (Number.isNaN(major)) throw new Error(`not a Node.js version: ${JSON.stringify(version)}`);
  const flags = major >= 24 ? FLAGS_FROM_24 : FLAGS_BEFORE_24;
  if (command !== "agent") return flags;
  return flags.map((f) => (flagName(f) === flagName(AGENT_SEMI_SPACE) ? AGENT_SEMI_SPACE : f));
}

/** A flag's name (`--max-semi-space-size=4` -> `--max-semi-space-size`); V8 takes `_` for `-`. */
function flagName(flag: string): string {
  return flag.split("=")[0]!.replaceAll("_", "-");
}

/**
 * Every flag at every value our sets give (any major, any command): a flag given at one of these
 * came from us (a `#!` line, a launcher), at another value from the operator.
 */
const OUR_FLAGS: ReadonlySet<string> = new Set([...FLAGS_BEFORE_24, ...FLAGS_FROM_24, AGENT_SEMI_SPACE]);

/**
 * The flags of `nodeFlagsFor(version, command)` a process started with `execArgv` should get
 * and does not run with: absent, or (the last one given counts) at another value of ours (the
 * server's young generation for an agent, Node.js 20's old-space floor on 26). A value none of
 * our sets gives is the operator's and stays. What a launcher appends when it starts node again
 * for that command.
 */
export function nodeFlagsToApply(
  execArgv: readonly string[],
  version: string,
  command: string | undefined,
): readonly string[] {
  return nodeFlagsFor(version, command).filter((flag) => {
    const given = execArgv.filter((f) => flagName(f) === flagName(flag)).at(-1);
    if (given === undefined) return true;
    const value = `${flagName(given)}${given.slice(given.split("=")[0]!.length)}`;
    return value !== flag && OUR_FLAGS.has(value);
  });
}

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace -- augmenting @types/node's namespace
  namespace NodeJS {
    interface Process {
      /** Node.js 22.15 / 23.11 and later (the types of the oldest supported major lack it). */
      execve?(file: string, args?: readonly string[], env?: NodeJS.ProcessEnv): never;
    }
  }
}

/**
 * Start this process again (execve: same PID, standard streams and environment) under the flags
 * of `command` it lacks ({@link nodeFlagsToApply}), given after its own so they win. Returns
 * when nothing is missing or this node cannot (no `process.execve` before Node.js 22.15): the
 * command then runs with the flags it has. main.ts and proxy-agent.ts call it for the commands
 * with flags of their own, so the image's entry points, whose `#!` line carries every command's
 * flags, and `node main.js agent` alike run the agent with its own.
 */
export function restartWithNodeFlags(command: string): void {
  const apply = nodeFlagsToApply(process.execArgv, process.versions.node, command);
  if (apply.length === 0 || process.execve === undefined) return;
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...apply, ...process.argv.slice(1)]);
}

/** {@link nodeFlagsFor} the node running this process: for children started with `process.execPath`. */
export const NODE_FLAGS: readonly string[] = nodeFlagsFor(process.versions.node);

/**
 * The `#!` line of the `cluster-proxy` executable. A `#!` line cannot choose by Node version, so
 * it carries the flags every Node major accepts (Node 20's); {@link logMissingNodeFlags} says at
 * start-up what a newer node runs without.
 */
export const SHEBANG = `#!/usr/bin/env -S node ${FLAGS_BEFORE_24.join(" ")}`;

/**
 * The flags of `nodeFlagsFor(version)` a process started with `execArgv` lacks (by name: any value
 * counts, the operator may have chosen other sizes; V8 takes `_` for `-`).
 */
export function missingNodeFlags(
  execArgv: readonly string[] = process.execArgv,
  version: string = process.versions.node,
): string[] {
  const given = new Set(execArgv.map(flagName));
  return nodeFlagsFor(version).filter((flag) => !given.has(flagName(flag)));
}

/** Say at start-up (info) which of this node's flags ({@link nodeFlagsFor}) this process runs without, and what it costs. */
export function logMissingNodeFlags(logger: { info(obj: object, msg: string): void }): void {
  const missing = missingNodeFlags();
  if (missing.length === 0) return;
  logger.info(
    { missing, node: process.version, run: `node ${NODE_FLAGS.join(" ")} <path to cluster-proxy's main.js> ...` },
    "node runs without cluster-proxy's V8 flags for this Node.js version: bulk transfers cost up to 1.7x the CPU and connection bursts ~30 KiB more memory per connection",
  );
}
