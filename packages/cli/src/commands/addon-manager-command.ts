/**
 * `cluster-proxy addon-manager`: run the hub addon manager until SIGTERM/SIGINT, and
 * `cluster-proxy manifests crds`: print the CustomResourceDefinitions it needs.
 */
import type { Command } from "commander";
import {
  ConfigError,
  addonManagerOptionSpecs,
  addonManagerOptionsSchema,
  type AddonManagerOptions,
} from "@cluster-proxy/api";
import type { CliContext } from "../cli-context.js";
import { crdManifestYaml } from "../reference/crd-manifest.js";
import { createLogger } from "./log-output.js";
import { loadKubeConfig } from "../hub/hub-access.js";
import { registerOptionCommand } from "./option-command.js";
import { runComponent } from "./run-component.js";

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
    const kc = await loadKubeConfig("--kubeconfig", options.kubeconfig);
    if (!kc.getCurrentCluster())
      throw new ConfigError("--kubeconfig: no current cluster (set --kubeconfig or run in a pod)");
    const { AddonManager } = await import("@cluster-proxy/addon-manager");
    const manager = new AddonManager(options, { kubeConfig: kc, logger });
    const code = await runComponent(ctx, manager, {
      name: "addon manager",
      logger,
      specs: addonManagerOptionSpecs,
      options,
      started: (ports) => ({ ...ports, identity: manager.identity || undefined }),
      lost: manager.leadershipLost,
    });
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
