/**
 * The `cluster-proxy` command tree and its runner. Errors are one line on stderr naming the
 * flag; the exit status comes from the error's code (exit-status.ts: 2 for bad usage or
 * configuration, 1 for failures while running).
 */
import type { Command } from "commander";
import { registerAddonManagerCommand } from "./commands/addon-manager-command.js";
import { registerAgentCommand } from "./commands/agent-command.js";
import { registerCertsCommand } from "./commands/certs-command.js";
import { registerGatewayCommand } from "./commands/gateway-command.js";
import { processContext, type CliContext } from "./cli-context.js";
import { rootCommand, runCommandTree } from "./command-tree.js";
import { registerServerCommand } from "./commands/server-command.js";
import { registerUpCommand } from "./up/up-command.js";
import { registerPortForwardCommand } from "./commands/port-forward-command.js";
import { registerKubeconfigCommand } from "./commands/kubeconfig-command.js";
import { registerHealthCommand } from "./commands/health-command.js";
import { registerCredentialCommand } from "./commands/credential-command.js";
import { registerRelayCommand } from "./commands/relay-command.js";

export { cliVersion } from "./command-tree.js";

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
  cluster-proxy credential --service-account team-a/reader   # exec plugin: a short-lived token for the gateway

Addressing: <cluster>:<port> reaches the cluster's kube-apiserver (for an agent's own cluster,
--apiserver-address); <host>.<cluster>:<port> reaches host:port inside that cluster's network.
`;

/** Build the command tree. `setExitCode` receives the exit code of long-running commands. */
export function buildProgram(ctx: CliContext, setExitCode: (code: number) => void = () => undefined): Command {
  const program = rootCommand(ctx).addHelpText("after", OVERVIEW);
  registerUpCommand(program, ctx, setExitCode);
  registerServerCommand(program, ctx, setExitCode);
  registerAgentCommand(program, ctx, setExitCode);
  registerCertsCommand(program, ctx);
  registerAddonManagerCommand(program, ctx, setExitCode);
  registerGatewayCommand(program, ctx, setExitCode);
  registerHealthCommand(program, ctx, setExitCode);
  registerKubeconfigCommand(program, ctx);
  registerPortForwardCommand(program, ctx, setExitCode);
  registerRelayCommand(program, ctx, setExitCode);
  registerCredentialCommand(program, ctx);
  program.commands.forEach((cmd) => cmd.helpOption("-h, --help", "show help"));
  return program;
}

/**
 * Run the CLI with `args` (without the node and script paths). Resolves with the process exit
 * code; never rejects.
 */
export async function runCli(args: readonly string[], ctx: CliContext = processContext()): Promise<number> {
  return runCommandTree((setExitCode) => buildProgram(ctx, setExitCode), args, ctx);
}
