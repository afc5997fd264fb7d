/**
 * What every `cluster-proxy` command tree shares: its root command (name, version, help and
 * output through the context) and its runner. Errors are one line on stderr naming the flag;
 * the exit status comes from the error's code (exit-status.ts: 2 for bad usage or
 * configuration, 1 for failures while running). The whole tree is program.ts; the agent's
 * process runs a tree of the agent alone (agent-program.ts), so it loads no other command.
 */
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { agentOptionSpecs, serverOptionSpecs } from "@cluster-proxy/api";
import type { CliContext } from "./cli-context.js";
import { EXIT_STATUS_BY_CODE, exitStatusOf } from "./exit-status.js";
import { normalizeGoArgs } from "./commands/option-flags.js";
import { errorMessage } from "@cluster-proxy/errors";

/** The version in this package's package.json. */
export function cliVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version?: string };
  return pkg.version ?? "0.0.0";
}

/** The root `cluster-proxy` command, without subcommands: version, help, output through `ctx`. */
export function rootCommand(ctx: CliContext): Command {
  return new Command("cluster-proxy")
    .description(
      "cluster-proxy: reach services in managed clusters from the hub through outbound agent tunnels (konnectivity protocol).",
    )
    .version(cliVersion(), "--version", "print the version (-v is klog's verbosity in server and agent, as in Go)")
    .helpOption("-h, --help", "show help")
    .exitOverride()
    .configureOutput({
      writeOut: (text) => ctx.stdout(text),
      writeErr: (text) => ctx.stderr(text),
      outputError: () => undefined, // errors are printed once, by runCommandTree
    })
    .showSuggestionAfterError(true);
}

/** The flag named by a commander error message (`unknown option '--x=1'` -> `--x`). */
function flagOfCommanderError(message: string): string | undefined {
  const m = /'(-{1,2}[^'=\s]+)/.exec(message);
  return m?.[1];
}

/** One-line text of a commander usage error. */
function describeCommanderError(err: CommanderError, command: string): string {
  const first = err.message.replace(/^error:\s*/, "").split("\n")[0] ?? err.message;
  const flag = flagOfCommanderError(err.message);
  const suggestion = /\(Did you mean (.+)\?\)/.exec(err.message)?.[1];
  const help = `run "${command} --help" for the flags`;
  switch (err.code) {
    case "commander.unknownOption":
      return `${flag ?? first}: unknown flag${suggestion ? ` (did you mean ${suggestion}?)` : ""}; ${help}`;
    case "commander.optionMissingArgument":
      return `${flag ?? first}: needs a value`;
    case "commander.unknownCommand":
      return `${first}; run "cluster-proxy --help" for the commands`;
    default:
      return `${first}; ${help}`;
  }
}

/**
 * Run the command tree `build` makes with `args` (without the node and script paths). `build`
 * receives the setter of the exit code of long-running commands. Resolves with the process exit
 * code; never rejects.
 */
export async function runCommandTree(
  build: (setExitCode: (code: number) => void) => Command,
  args: readonly string[],
  ctx: CliContext,
): Promise<number> {
  let exitCode = 0;
  const program = build((code) => {
    exitCode = code;
  });
  const sub = program.commands.find((cmd) => cmd.name() === args[0]);
  const commandName = sub ? `cluster-proxy ${sub.name()}` : "cluster-proxy";
  const goSpecs = sub?.name() === "server" ? serverOptionSpecs : sub?.name() === "agent" ? agentOptionSpecs : undefined;
  const argv = goSpecs ? [args[0]!, ...normalizeGoArgs(args.slice(1), goSpecs)] : [...args];
  try {
    await program.parseAsync(argv, { from: "user" });
    return exitCode;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === "commander.helpDisplayed" || err.code === "commander.version" || err.exitCode === 0) return 0;
      if (err.code === "commander.help" || err.code === "commander.executeSubCommandAsync") return err.exitCode;
      ctx.stderr(`${commandName}: ${describeCommanderError(err, commandName)}\n`);
      return EXIT_STATUS_BY_CODE.CP_ERR_USAGE;
    }
    ctx.stderr(`${commandName}: ${errorMessage(err)}\n`);
    return exitStatusOf(err);
  }
}
