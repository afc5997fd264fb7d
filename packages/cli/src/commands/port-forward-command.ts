/**
 * `cluster-proxy port-forward --cluster <name> <local-port>:<host>:<port>...`: a local listener
 * per spec; every accepted connection gets its own tunnel to `<host>.<cluster>:<port>` through
 * the proxy-servers' gRPC client door. A failed connection is reported on stderr, one line each,
 * and the listener keeps serving.
 */
import net from "node:net";
import type { Command } from "commander";
import { ConfigError, GRPC_DOOR_PORT } from "@cluster-proxy/api";
import { CommandFailure, type CliContext } from "../cli-context.js";
import { lazyHub, openProxyRoute, proxyCredentials, type ProxyEndpoint, type ProxyRoute } from "../hub/hub-access.js";
import { portForwardOptionsSchema, type PortForwardOptions } from "../hub/hub-options.js";
import { registerOptionCommand } from "./option-command.js";
import {
  localCluster,
  localCredentials,
  localEndpoint,
  requireConfiguredHub,
  selectLocalHub,
} from "../up/local-hub.js";
import { runUntilSignalled } from "./shutdown-signals.js";

const EXAMPLE = `
Examples:
  cluster-proxy port-forward --cluster mc1 8080:web.default.svc:80
  cluster-proxy port-forward --cluster mc1 6443:mc1:443 9090:10.0.3.7:9090
  cluster-proxy port-forward --cluster east 0:east:80   # the local hub of "cluster-proxy up"

<host> is any address inside the cluster's network as the agent resolves it (a Service name, a
pod IP); the cluster's own name is its kube-apiserver. Local port 0 picks a free port.
Stops on SIGINT/SIGTERM.
`;

/** One `<local-port>:<host>:<port>` argument. */
export interface ForwardSpec {
  localPort: number;
  host: string;
  port: number;
}

/** Parse `<local-port>:<host>:<port>` (IPv6 hosts in brackets). */
export function parseForwardSpec(text: string): ForwardSpec {
  const m = /^(\d{1,5}):(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(text);
  const port = (s: string | undefined, min: number): number | undefined => {
    const n = Number(s);
    return Number.isInteger(n) && n >= min && n <= 65535 ? n : undefined;
  };
  const localPort = port(m?.[1], 0);
  const remotePort = port(m?.[3], 1);
  if (!m || localPort === undefined || remotePort === undefined)
    throw new ConfigError(`"${text}": want <local-port>:<host>:<port>, e.g. 8080:web.default.svc:80`);
  return { localPort, host: m[2]!.replace(/^\[|\]$/g, ""), port: remotePort };
}

/** The tunnel address of `spec` in `cluster`: the cluster's name alone, or `<host>.<cluster>`. */
export function forwardAddress(spec: ForwardSpec, cluster: string): string {
  const host = spec.host === cluster || spec.host.endsWith(`.${cluster}`) ? spec.host : `${spec.host}.${cluster}`;
  return `${host}:${spec.port}`;
}

/** How long a connection that could not be forwarded is given to close its side after ours. */
const UNSERVED_LINGER_MS = 5_000;

/**
 * Closes a local connection whose remote side could not be dialled with a FIN, never a reset: what
 * it sent is read and dropped (closing a socket with unread input would reset it, and whether the
 * client had sent anything yet is a race), and the socket goes once the client closes too, or
 * after {@link UNSERVED_LINGER_MS}. The client sees an empty reply every time.
 */
function closeUnserved(local: net.Socket): void {
  const linger = setTimeout(() => local.destroy(), UNSERVED_LINGER_MS);
  linger.unref();
  local.once("close", () => clearTimeout(linger));
  local.once("end", () => local.destroy());
  local.resume();
  local.end();
}

/** Register `port-forward` on `program`. */
export function registerPortForwardCommand(
  program: Command,
  ctx: CliContext,
  setExitCode: (code: number) => void,
): void {
  registerOptionCommand(program, ctx, {
    name: "port-forward",
    summary: "forward local ports to addresses inside a managed cluster, through the hub",
    description:
      "Listen on local ports and forward every connection through the hub's proxy-servers to an address inside a managed cluster.",
    example: EXAMPLE,
    schema: portForwardOptionsSchema,
    argument: ["<specs...>", "<local-port>:<host>:<port>"],
    run: (flags, command) => forward(flags, command.args),
  });

  async function forward(flags: PortForwardOptions, specTexts: readonly string[]): Promise<void> {
    const specs = specTexts.map(parseForwardSpec);
    const local = selectLocalHub(flags, ctx.cwd);
    let endpoint: ProxyEndpoint;
    let creds;
    let route: ProxyRoute | undefined;
    if (local) {
      localCluster(local, flags.cluster);
      endpoint = localEndpoint(local, "grpc");
      creds = localCredentials(local);
    } else {
      const hub = requireConfiguredHub(lazyHub(flags, ctx.env), flags, ctx.env);
      creds = await proxyCredentials(hub, flags);
      route = await openProxyRoute(hub, flags, GRPC_DOOR_PORT, {
        onError: (message) => ctx.stderr(`${message}\n`),
      });
      endpoint = route.endpoint;
      if (route.via === "apiserver") ctx.stderr(`Reaching the proxy-servers through the hub: ${route.describe()}\n`);
    }
    const { TunnelClient } = await import("@cluster-proxy/client");
    const client = new TunnelClient({ proxy: { ...endpoint, ...creds } });
    const sockets = new Set<net.Socket>();
    const servers: net.Server[] = [];
    const serve = (spec: ForwardSpec): Promise<void> => {
      const target = forwardAddress(spec, flags.cluster);
      const server = net.createServer((local) => {
        sockets.add(local);
        local.on("close", () => sockets.delete(local));
        local.on("error", () => undefined);
        local.pause();
        const from = `${local.remoteAddress ?? "?"}:${local.remotePort ?? "?"}`;
        client.dial(target).then(
          (remote) => {
            if (local.destroyed) {
              remote.destroy();
              return;
            }
            remote.on("error", (err: Error) => {
              ctx.stderr(`connection from ${from} to ${target}: ${err.message}\n`);
              local.destroy();
            });
            local.on("close", () => remote.destroy());
            remote.on("close", () => local.destroy());
            local.pipe(remote).pipe(local);
            local.resume();
          },
          (err: Error) => {
            ctx.stderr(`connection from ${from} to ${target} failed: ${err.message}\n`);
            closeUnserved(local);
          },
        );
      });
      servers.push(server);
      return new Promise((resolveListen, reject) => {
        server.once("error", (err) =>
          reject(new CommandFailure(`listen on ${flags.address}:${spec.localPort}: ${err.message}`, { cause: err })),
        );
        server.listen(spec.localPort, flags.address, () => {
          const { port } = server.address() as net.AddressInfo;
          ctx.stdout(`Forwarding from ${flags.address}:${port} -> ${target} (cluster ${flags.cluster})\n`);
          resolveListen();
        });
      });
    };
    const stop = async (): Promise<number> => {
      for (const s of servers) s.close();
      for (const s of sockets) s.destroy();
      await client.close();
      await route?.close();
      return 0;
    };
    try {
      for (const spec of specs) await serve(spec);
    } catch (err) {
      await stop();
      throw err;
    }
    setExitCode(
      await runUntilSignalled(ctx.signals, {
        graceful: stop,
        forced: () => Promise.resolve(1),
      }),
    );
  }
}
