#!/usr/bin/env -S node --initial-old-space-size=64 --max-semi-space-size=4
/**
 * The `cluster-proxy` executable. Everything heavy (server, agent, pino, X.509) is loaded by
 * the subcommand that needs it, so `cluster-proxy --help` stays fast; `agent` loads the agent's
 * command tree alone (agent-program.ts), so an idle agent holds none of the other commands.
 */
import { loadAgentProgram } from "./agent-loader.js";
import { restartWithNodeFlags } from "./node-flags.js";

const args = process.argv.slice(2);
// The agent's process has V8 flags of its own (nodeFlagsFor): start again with them if need be.
if (args[0] === "agent") restartWithNodeFlags("agent");
const code =
  args[0] === "agent"
    ? await (await loadAgentProgram()).runAgentCli(args.slice(1))
    : await (await import("./program.js")).runCli(args);
// Long-running commands have closed everything they started; exit now rather than wait for
// stray handles (e.g. a client that never hung up).
process.exit(code);
