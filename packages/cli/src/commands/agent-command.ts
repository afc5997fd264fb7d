/**
 * `cluster-proxy agent`: run the proxy-agent until SIGTERM/SIGINT. The first signal sends
 * DRAIN to every server and waits (up to --drain-grace-period) for open connections to finish;
 * a second signal closes at once.
 */
import type { Command } from "commander";
import { agentOptionSpecs, agentOptionsSchema, type AgentOptions } from "@cluster-proxy/api";
import type { CliContext } from "../cli-context.js";
import { createLogger } from "./log-output.js";
import { logMissingNodeFlags } from "../node-flags.js";
import { registerOptionCommand } from "./option-command.js";
import { runComponent } from "./run-component.js";

const EXAMPLE = `
Example (certificates from \`cluster-proxy certs --dir certs --cluster east\`):
  cluster-proxy agent --cluster-name east \\
    --proxy-server-host hub.example.com --proxy-server-port 8091 \\
    --ca-cert certs/ca.crt --agent-cert certs/agent-east.crt --agent-key certs/agent-east.key \\
    --apiserver-address kubernetes.default.svc:443

Dials to east:<port> then reach --apiserver-address, and <host>.east:<port> reaches <host>:<port>
inside the cluster. Flags marked Go-compatible mean what they mean for the Go proxy-agent, with
its defaults (this binary is also installed as proxy-agent); Go flags marked "Go flag" are
accepted with the note's meaning, and a Go flag we do not support is refused naming it.
`;

/** Register `agent` on `program`. */
export function registerAgentCommand(program: Command, ctx: CliContext, setExitCode: (code: number) => void): void {
  registerOptionCommand(program, ctx, {
    name: "agent",
    summary: "run the proxy-agent (managed-cluster side)",
    description:
      "Run the proxy-agent: keeps outbound mTLS tunnels to every proxy-server behind --proxy-server-host and dials endpoints in this cluster for them.",
    example: EXAMPLE,
    schema: agentOptionsSchema,
    run: runAgent,
  });

  async function runAgent(options: AgentOptions): Promise<void> {
    const logger = await createLogger(options, "proxy-agent", ctx.logFd);
    logMissingNodeFlags(logger);
    const { ProxyAgent, validateAgentOptions } = await import("@cluster-proxy/agent");
    // The schema's checks ran on the flags; this adds the agent's own (the --allow-destinations rules).
    const agent = new ProxyAgent(validateAgentOptions(options), { logger });
    const code = await runComponent(ctx, agent, {
      name: "proxy-agent",
      logger,
      specs: agentOptionSpecs,
      options,
      started: (as) => ({ cluster: options.clusterName, ...as }),
    });
    setExitCode(code);
  }
}
