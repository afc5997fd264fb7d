/**
 * `cluster-proxy gateway`: run the gateway (hub users reach managed clusters as themselves) until
 * SIGTERM/SIGINT.
 */
import type { Command } from "commander";
import { ConfigError, gatewayOptionSpecs, gatewayOptionsSchema, type GatewayOptions } from "@cluster-proxy/api";
import type { CliContext } from "../cli-context.js";
import { createLogger } from "./log-output.js";
import { loadKubeConfig } from "../hub/hub-access.js";
import { registerOptionCommand } from "./option-command.js";
import { runComponent } from "./run-component.js";

const EXAMPLE = `
Example (what the chart runs: the Secrets of docs/design/gateway.md mounted under /etc/gateway):
  cluster-proxy gateway --serving-cert /etc/gateway/serving/tls.crt --serving-key /etc/gateway/serving/tls.key \\
    --proxy-server-host proxy-entrypoint.open-cluster-management-addon.svc --proxy-ca /etc/gateway/serving/ca.crt \\
    --proxy-cert /etc/gateway/proxy-client/tls.crt --proxy-key /etc/gateway/proxy-client/tls.key \\
    --identity-cert /etc/gateway/identity/tls.crt --identity-key /etc/gateway/identity/tls.key \\
    --agent-ca /etc/gateway/identity/agent-ca.crt

Users reach clusters through it with a kubeconfig from \`cluster-proxy kubeconfig --gateway\` (docs/guides/gateway.md).
The caller needs, on the hub, the verb of the request (GET/HEAD get, POST create, PUT update,
PATCH patch, DELETE delete) on managedclusters/proxy
(group cluster.open-cluster-management.io, resourceNames: [<cluster>]). SIGTERM
turns /readyz to 503, stops accepting and lets requests in flight finish (25s); a second signal
exits at once. Audit records go to --audit-log, one JSON line each.
`;

/** Register `gateway` on `program`. */
export function registerGatewayCommand(program: Command, ctx: CliContext, setExitCode: (code: number) => void): void {
  registerOptionCommand(program, ctx, {
    name: "gateway",
    summary: "run the gateway (hub users reach managed clusters as themselves)",
    description:
      "Run the gateway: https://<gateway>/<cluster>/<kube-api path> authenticates the caller on the hub (TokenReview, OIDC, client certificates), authorizes it with a hub SubjectAccessReview on managedclusters/proxy, and relays the request through the proxy-servers to the cluster's agent, which performs it as the caller (impersonation with --impersonation-prefix).",
    example: EXAMPLE,
    schema: gatewayOptionsSchema,
    run: runGateway,
  });

  async function runGateway(options: GatewayOptions): Promise<void> {
    const logger = await createLogger(
      { logLevel: options.logLevel, logFormat: options.logFormat },
      "gateway",
      ctx.logFd,
    );
    const kc = await loadKubeConfig("--hub-kubeconfig", options.hubKubeconfig);
    if (!kc.getCurrentCluster()) throw new ConfigError("--hub-kubeconfig: no current cluster (set it or run in a pod)");
    const { Gateway, kubeHubApi } = await import("@cluster-proxy/gateway");
    // Reads no file: a file that cannot be used fails the start, naming its flag (exit status 2).
    const gateway = new Gateway(options, { hub: kubeHubApi(kc, logger), logger });
    const code = await runComponent(ctx, gateway, {
      name: "gateway",
      logger,
      specs: gatewayOptionSpecs,
      options,
      started: (ports) => ({ ...ports }),
    });
    setExitCode(code);
  }
}
