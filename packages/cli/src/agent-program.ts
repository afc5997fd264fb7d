/**
 * The agent's process: `cluster-proxy agent` (and `proxy-agent`) run a command tree of the agent
 * alone, so an idle agent loads none of the other commands' modules. main.ts and proxy-agent.ts
 * load it from `dist/agent-bundle.js`, where `npm run build` bundles it with what it imports
 * (scripts/build-agent-bundle.ts): one module graph of a few files instead of ~250 modules
 * cuts an idle agent's RSS by ~14 MiB on Node.js 26 (docs/design/decisions.md).
 */
import type { Command } from "commander";
import { registerAgentCommand } from "./commands/agent-command.js";
import { processContext, type CliContext } from "./cli-context.js";
import { rootCommand, runCommandTree } from "./command-tree.js";

/** The command tree with `agent` only: the same flags, help and errors as in the whole CLI's. */
export function buildAgentProgram(ctx: CliContext, setExitCode: (code: number) => void = () => undefined): Command {
  const program = rootCommand(ctx);
  registerAgentCommand(program, ctx, setExitCode);
  program.commands.forEach((cmd) => cmd.helpOption("-h, --help", "show help"));
  return program;
}

/**
 * Run `cluster-proxy agent` with `args` (after `agent`, without the node and script paths).
 * Resolves with the process exit code; never rejects.
 */
export async function runAgentCli(args: readonly string[], ctx: CliContext = processContext()): Promise<number> {
  return runCommandTree((setExitCode) => buildAgentProgram(ctx, setExitCode), ["agent", ...args], ctx);
}
