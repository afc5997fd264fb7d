/**
 * `cluster-proxy relay`: a local port forwarded, byte for byte, through the hub kube-apiserver's
 * `pods/portforward` to a Ready proxy-server's door, for kubeconfigs of `kubeconfig --via=apiserver`.
 * Guide: docs/guides/hub-operations.md#from-a-workstation-only-the-hub-kubeconfig
 */
import type { Command } from "commander";
import { CONNECT_DOOR_PORT, GATEWAY_PORT, GRPC_DOOR_PORT } from "@cluster-proxy/api";
import type { CliContext } from "../cli-context.js";
import { GATEWAY_SELECTOR } from "../hub/apiserver-route.js";
import { lazyHub, openApiserverRoute } from "../hub/hub-access.js";
import { relayOptionsSchema, type RelayOptions } from "../hub/hub-options.js";
import { registerOptionCommand } from "./option-command.js";
import { requireConfiguredHub } from "../up/local-hub.js";
import { runUntilSignalled } from "./shutdown-signals.js";

const EXAMPLE = `
Examples:
  cluster-proxy relay --kubeconfig hub.kubeconfig &    # 127.0.0.1:${CONNECT_DOOR_PORT}, for kubeconfigs of "cluster-proxy kubeconfig --via=apiserver"
  cluster-proxy relay --door grpc --port 18090          # the gRPC client door, for SDK clients
  cluster-proxy relay --door gateway &                  # the gateway's port 9092, then:
  cluster-proxy kubeconfig --gateway=https://127.0.0.1:9092 -o hub-clusters.kubeconfig

Each connection goes to a Ready proxy-server pod (with --door gateway: a Ready gateway pod), the
last one while it stays Ready, else another, through the hub kube-apiserver (WebSocket
port-forward). Rights on the hub: list pods and create pods/portforward in the proxy-server
namespace. Stops on SIGINT/SIGTERM.
`;

/** The door of `--door`: the pods' port, which pods (default: the proxy-servers), how the ready line names it. */
interface Door {
  port: number;
  selector?: string;
  what: string;
}

/** The doors by `--door` value. */
const DOORS: Record<RelayOptions["door"], Door> = {
  connect: { port: CONNECT_DOOR_PORT, what: "the proxy-servers' HTTP CONNECT door" },
  grpc: { port: GRPC_DOOR_PORT, what: "the proxy-servers' gRPC door" },
  gateway: { port: GATEWAY_PORT, selector: GATEWAY_SELECTOR, what: "the gateway" },
};

/** Register `relay` on `program`. */
export function registerRelayCommand(program: Command, ctx: CliContext, setExitCode: (code: number) => void): void {
  registerOptionCommand(program, ctx, {
    name: "relay",
    summary: "forward a local port to the proxy-servers through the hub kube-apiserver (for tunnel kubeconfigs)",
    description:
      "Listen on a local port and forward every connection through the hub kube-apiserver (pods/portforward) to a door of a Ready proxy-server pod: what a kubeconfig written with --via=apiserver needs beside kubectl.",
    example: EXAMPLE,
    schema: relayOptionsSchema,
    run: relay,
  });

  async function relay(flags: RelayOptions): Promise<void> {
    const door = DOORS[flags.door];
    const doorPort = door.port;
    const port = flags.port ?? doorPort;
    const hub = requireConfiguredHub(
      lazyHub({ ...flags, inClusterProxyCertLookup: true, via: "apiserver" }, ctx.env),
      flags,
      ctx.env,
    );
    const route = await openApiserverRoute(hub, {}, doorPort, {
      listen: { host: flags.address, port },
      onError: (message) => ctx.stderr(`${message}\n`),
      ...(door.selector ? { selector: door.selector } : {}),
    });
    ctx.stdout(
      `Relaying ${flags.address}:${route.endpoint.port} -> ${door.what} through the hub kube-apiserver (${route.describe()})\n`,
    );
    setExitCode(
      await runUntilSignalled(ctx.signals, {
        graceful: async () => {
          await route.close();
          return 0;
        },
        forced: () => Promise.resolve(1),
      }),
    );
  }
}
