/**
 * `cluster-proxy addon-manager`: run the hub addon manager until SIGTERM/SIGINT, and
 * `cluster-proxy manifests crds`: print the CustomResourceDefinitions it needs.
 */
import type { Command } from "commander";
import { ConfigError, addonManagerOptionsSchema, type AddonManagerOptions } from "@cluster-proxy/api";
import { CommandFailure, type CliContext } from "./cli-context.js";
import { crdManifestYaml } from "./crd-manifest.js";
import { createLogger } from "./log-output.js";
import { registerOptionCommand } from "./option-command.js";
import { runUntilSignalled } from "./shutdown-signals.js";

const EXAMPLE = `
Example (a hub kubeconfig; the CRD first):
  cluster-proxy manifests crds | kubectl apply -f -
  cluster-proxy addon-manager --kubeconfig hub.kubeconfig --namespace open-cluster-management-addon

Leader election is on by default: run two replicas and one acts while the other waits. Exits 1
when it loses leadership (so it restarts clean). /healthz and /readyz on
--health-probe-bind-address, Prometheus metrics on --metrics-bind-address.
`;

/** Register `addon-manager` and `manifests` on `program`. */
export function registerAddonManagerCommand(
  program: Command,
  ctx: CliContext,
  setExitCode: (code: number) => void,
): void {
  registerOptionCommand(program, ctx, {
    name: "addon-manager",
    summary: "run the addon manager (hub controller for ManagedProxyConfiguration)",
    description:
      "Run the addon manager: reconciles each ManagedProxyConfiguration into proxy-servers on the hub (Deployment, Services, PodDisruptionBudget), their certificates (CAs kept in Secrets that outlive the configuration) and an honest status.",
    example: EXAMPLE,
    schema: addonManagerOptionsSchema,
    run: runAddonManager,
  });

  async function runAddonManager(options: AddonManagerOptions): Promise<void> {
    const logger = await createLogger(
      { logLevel: options.logLevel, logFormat: options.logFormat },
      "addon-manager",
      ctx.logFd,
    );
    const k8s = await import("@kubernetes/client-node");
    const kc = new k8s.KubeConfig();
    try {
      if (options.kubeconfig) kc.loadFromFile(options.kubeconfig);
      else kc.loadFromCluster();
    } catch (err) {
      throw new ConfigError(
        `${options.kubeconfig ? `--kubeconfig ${options.kubeconfig}` : "in-cluster configuration"}: ${(err as Error).message}`,
        { cause: err },
      );
    }
    if (!kc.getCurrentCluster())
      throw new ConfigError("--kubeconfig: no current cluster (set --kubeconfig or run in a pod)");
    const { AddonManager } = await import("@cluster-proxy/addon-manager");
    const manager = new AddonManager(options, { kubeConfig: kc, logger });
    let ports: { healthPort?: number; metricsPort?: number };
    try {
      ports = await manager.start();
    } catch (err) {
      await manager.close().catch(() => undefined);
      throw new CommandFailure(`addon manager failed to start: ${(err as Error).message}`, { cause: err });
    }
    logger.info({ ...ports, identity: manager.identity || undefined }, "addon manager started");
    let lost = false;
    const leadership = new AbortController();
    void manager.leadershipLost.then(() => {
      lost = true;
      leadership.abort();
    });
    const code = await runUntilSignalled(
      ctx.signals,
      {
        graceful: async (signal) => {
          logger.info({ signal }, "shutting down (a second signal exits at once)");
          await manager.close();
          return lost ? 1 : 0;
        },
        forced: () => Promise.resolve(1),
        onError: (err, stage) => logger.error({ err, stage }, "shutdown failed"),
      },
      leadership.signal,
    );
    setExitCode(code);
  }

  program
    .command("manifests")
    .summary("print Kubernetes manifests (crds)")
    .description("Print manifests generated from the API schema: `crds` is the ManagedProxyConfiguration CRD.")
    .argument("<what>", "crds")
    .action(async (what: string) => {
      if (what !== "crds") throw new ConfigError(`manifests: unknown "${what}" (use crds)`);
      ctx.stdout(await crdManifestYaml());
    });
}
