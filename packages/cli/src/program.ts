/**
 * The `cluster-proxy` command tree and its runner. Errors are one line on stderr naming the
 * flag; the exit status comes from the error's code (exit-status.ts: 2 for bad usage or
 * configuration, 1 for failures while running).
 */
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { agentOptionSpecs, serverOptionSpecs } from "@cluster-proxy/api";
import { registerAddonManagerCommand } from "./addon-manager-command.js";
import { registerAgentCommand } from "./agent-command.js";
import { registerCertsCommand } from "./certs-command.js";
import { registerGatewayCommand } from "./gateway-command.js";
import { processContext, type CliContext } from "./cli-context.js";
import { EXIT_STATUS_BY_CODE, exitStatusOf } from "./exit-status.js";
import { normalizeGoArgs } from "./option-flags.js";
import { registerServerCommand } from "./server-command.js";
import { registerUpCommand } from "./up-command.js";
import { registerPortForwardCommand } from "./port-forward-command.js";
import { registerKubeconfigCommand } from "./kubeconfig-command.js";
import { registerHealthCommand } from "./health-command.js";

/** The version in this package's package.json. */
export function cliVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version?: string };
  return pkg.version ?? "0.0.0";
}

const OVERVIEW = `
Examples:
  cluster-proxy up                                   # local hub + demo clusters east and west
  curl -p -x http://127.0.0.1:8080 http://east:80/    # reach east's sample service through it
  cluster-proxy certs --dir certs --cluster east     # certificates for a standalone deployment
  cluster-proxy server --help                        # proxy-server flags (Go-compatible names)
  cluster-proxy agent --help                         # proxy-agent flags
  cluster-proxy addon-manager --help                 # the hub controller (ManagedProxyConfiguration)
  cluster-proxy gateway --help                       # hub users reach clusters as themselves
  cluster-proxy health --kubeconfig hub.kubeconfig   # addon and tunnel health per managed cluster
  cluster-proxy kubeconfig --cluster mc1 --token T   # kubectl to mc1 through the hub
  cluster-proxy port-forward --cluster mc1 8080:web.default.svc:80

Addressing: <cluster>:<port> reaches the cluster's kube-apiserver (for an agent's own cluster,
--apiserver-address); <host>.<cluster>:<port> reaches host:port inside that cluster's network.
`;

/** Build the command tree. `setExitCode` receives the exit code of long-running commands. */
export function buildProgram(ctx: CliContext, setExitCode: (code: number) => void = () => undefined): Command {
  const program = new Command("cluster-proxy")
    .description(
      "cluster-proxy: reach services in managed clusters from the hub through outbound agent tunnels (konnectivity protocol).",
    )
    .version(cliVersion(), "--version", "print the version (-v is klog's verbosity in server and agent, as in Go)")
    .helpOption("-h, --help", "show help")
    .exitOverride()
    .configureOutput({
      writeOut: (text) => ctx.stdout(text),
      writeErr: (text) => ctx.stderr(text),
      outputError: () => undefined, // errors are printed once, by runCli
    })
    .showSuggestionAfterError(true)
    .addHelpText("after", OVERVIEW);
  registerUpCommand(program, ctx, setExitCode);
  registerServerCommand(program, ctx, setExitCode);
  registerAgentCommand(program, ctx, setExitCode);
  registerCertsCommand(program, ctx);
  registerAddonManagerCommand(program, ctx, setExitCode);
  registerGatewayCommand(program, ctx, setExitCode);
  registerHealthCommand(program, ctx, setExitCode);
  registerKubeconfigCommand(program, ctx);
  registerPortForwardCommand(program, ctx, setExitCode);
  program.commands.forEach((cmd) => cmd.helpOption("-h, --help", "show help"));
  return program;
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
 * Run the CLI with `args` (without the node and script paths). Resolves with the process exit
 * code; never rejects.
 */
export async function runCli(args: readonly string[], ctx: CliContext = processContext()): Promise<number> {
  let exitCode = 0;
  const program = buildProgram(ctx, (code) => {
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
    ctx.stderr(`${commandName}: ${err instanceof Error ? err.message : String(err)}\n`);
    return exitStatusOf(err);
  }
}
