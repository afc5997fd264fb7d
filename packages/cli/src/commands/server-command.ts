/**
 * `cluster-proxy server`: run the proxy-server until SIGTERM/SIGINT.
 */
import type { Command } from "commander";
import { serverOptionSpecs, serverOptionsSchema, type ServerOptions } from "@cluster-proxy/api";
import type { CliContext } from "../cli-context.js";
import { createLogger } from "./log-output.js";
import { logMissingNodeFlags } from "../node-flags.js";
import { registerOptionCommand } from "./option-command.js";
import { runComponent } from "./run-component.js";

const EXAMPLE = `
Example (certificates from \`cluster-proxy certs --dir certs\`):
  cluster-proxy server --mode=both --proxy-strategies=destHost --keepalive-time=30s \\
    --server-cert certs/server.crt --server-key certs/server.key --server-ca-cert certs/client-ca.crt \\
    --cluster-cert certs/server.crt --cluster-key certs/server.key --cluster-ca-cert certs/agent-ca.crt

--server-ca-cert and --cluster-ca-cert should be different CAs: with one CA for both, an agent's
certificate (whose key lives in a managed cluster) is also accepted at the client front doors.

Flags marked Go-compatible mean what they mean for the Go konnectivity proxy-server, with its
defaults, so this binary (also installed as proxy-server) can replace it in an existing
deployment; Go flags marked "Go flag" are accepted with the note's meaning, and a Go flag we do
not support is refused naming it. SIGTERM or SIGINT drains: /readyz answers not ready, clients
and agents get GOAWAY, new dials are refused as draining, and open tunnels get
--graceful-shutdown-timeout (0: none) to finish before it closes; a second signal exits at once.
`;

/** Register `server` on `program`. */
export function registerServerCommand(program: Command, ctx: CliContext, setExitCode: (code: number) => void): void {
  registerOptionCommand(program, ctx, {
    name: "server",
    summary: "run the proxy-server (hub side)",
    description:
      "Run the proxy-server: agents connect to --agent-port (mTLS, or ServiceAccount tokens); clients dial <cluster>:<port> through --server-port / --uds-name, with the gRPC ProxyService (--mode=grpc, the default) or HTTP CONNECT (--mode=http-connect), or both at once (--mode=both, HTTP CONNECT on --http-connect-port). Every flag of the Go proxy-server is accepted (see the Go notes below); -v is klog's verbosity.",
    example: EXAMPLE,
    schema: serverOptionsSchema,
    run: runServer,
  });

  async function runServer(options: ServerOptions): Promise<void> {
    const logger = await createLogger(options, "proxy-server", ctx.logFd);
    logMissingNodeFlags(logger);
    const { ProxyServer } = await import("@cluster-proxy/server");
    const server = new ProxyServer(options, { logger });
    const code = await runComponent(ctx, server, {
      name: "proxy-server",
      logger,
      specs: serverOptionSpecs,
      options,
      started: () => ({ serverID: server.serverId, addresses: server.addresses() }),
    });
    setExitCode(code);
  }
}
