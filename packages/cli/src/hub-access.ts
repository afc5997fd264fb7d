/**
 * What the hub operations (`health`, `kubeconfig`, `port-forward`) need from the hub: its
 * kubeconfig (--kubeconfig, KUBECONFIG, or in-cluster), the ManagedProxyConfiguration, where its
 * proxy-server front doors are reachable, the client certificate to present there, and each
 * ManagedCluster's CA. Flags are clusteradm's names (`clusteradm proxy health`).
 */
import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import type { Command } from "commander";
import type { KubeConfig } from "@kubernetes/client-node";
import type { KubeApi, KubeObject } from "@cluster-proxy/addon-manager";
import { ConfigError, managedProxyConfigurationFromApi, type ManagedProxyConfiguration } from "@cluster-proxy/api";
import { CommandFailure } from "./cli-context.js";

/** The gRPC client door (`--server-port`), the default of `--proxy-server-port`. */
export const GRPC_DOOR_PORT = 8090;
/** The HTTP CONNECT door the addon manager opens on every proxy-server (`--http-connect-port`). */
export const CONNECT_DOOR_PORT = 8093;
/** The Secret in the proxy-server namespace with the proxy-servers' serving CA bundle (`ca.crt`). */
export const SERVER_CA_SECRET = "proxy-server-ca";
/** The ManagedProxyConfiguration (and ManagedClusterAddOn) name the Go addon and ours use. */
export const ADDON_NAME = "cluster-proxy";

/** The hub-access flags as commander parses them. */
export interface HubFlags {
  kubeconfig?: string;
  configuration: string;
  proxyServerHost?: string;
  proxyServerPort?: string;
  proxyServerName?: string;
  inClusterProxyCertLookup: boolean;
  proxyCaCert?: string;
  proxyCert?: string;
  proxyKey?: string;
}

/** Add the hub-access flags to `command`; `door` names the port that --proxy-server-port means. */
export function addHubFlags(command: Command, door: "grpc" | "connect"): Command {
  const port = door === "grpc" ? GRPC_DOOR_PORT : CONNECT_DOOR_PORT;
  return command
    .option("--kubeconfig <file>", "hub kubeconfig (default: $KUBECONFIG, then the in-cluster service account)")
    .option("--configuration <name>", "the ManagedProxyConfiguration", ADDON_NAME)
    .option(
      "--proxy-server-host <host>",
      "where the proxy-servers are reachable (default: the ingress of a LoadBalancer Service in the proxy-server namespace exposing the door, else <service>.<namespace>.svc inside the hub)",
    )
    .option(
      "--proxy-server-port <port>",
      `port of the ${door === "grpc" ? "gRPC client door (--server-port)" : "HTTP CONNECT door (--http-connect-port)"} (default: ${port}, or the LoadBalancer's port for it)`,
    )
    .option(
      "--proxy-server-name <name>",
      "TLS name to verify the proxy-server as (default: --proxy-server-host, or <service>.<namespace>.svc for a door found through a LoadBalancer Service; the serving certificate carries <service>.<namespace>.svc, localhost, 127.0.0.1 and additionalSANs)",
    )
    .option(
      "--in-cluster-proxy-cert-lookup [bool]",
      "read the client certificate and the proxy-servers' CA from the hub (Secrets proxy-client and proxy-server-ca in the proxy-server namespace) when --proxy-ca-cert/--proxy-cert/--proxy-key are not given",
      (v: string) => v !== "false",
      true,
    )
    .option("--proxy-ca-cert <file>", "CA bundle that verifies the proxy-server (PEM)")
    .option("--proxy-cert <file>", "client certificate for the proxy-server's client doors (PEM)")
    .option("--proxy-key <file>", "key of --proxy-cert (PEM)");
}

/** A hub client certificate and the CA that verifies the proxy-servers, PEM. */
export interface ProxyCredentials {
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

/** Where to reach a proxy-server front door. */
export interface ProxyEndpoint {
  host: string;
  port: number;
  /** The TLS name to verify (undefined: the host, an IP address checked against the IP SANs). */
  servername?: string;
}

/** Connected hub: its API and the ManagedProxyConfiguration. */
export interface Hub {
  api: KubeApi;
  mpc: ManagedProxyConfiguration;
}

/**
 * Load the hub kubeconfig as `kubectl` would: `kubeconfig` (the --kubeconfig flag), else the first
 * existing file of KUBECONFIG, else the pod's ServiceAccount (`file` undefined). Errors name the flag.
 */
/**
 * The kubeconfig `file`, or the pod's in-cluster configuration when it is undefined; a file that
 * cannot be read or parsed is a {@link ConfigError} naming `flag`.
 */
export async function loadKubeConfig(flag: string, file: string | undefined): Promise<KubeConfig> {
  const k8s = await import("@kubernetes/client-node");
  const kc = new k8s.KubeConfig();
  try {
    if (file) kc.loadFromFile(file);
    else kc.loadFromCluster();
  } catch (err) {
    throw new ConfigError(`${flag} ${file ?? "(in-cluster)"}: ${(err as Error).message}`, { cause: err });
  }
  return kc;
}

export async function loadHubKubeConfig(
  kubeconfig: string | undefined,
  env: NodeJS.ProcessEnv,
): Promise<{ kc: KubeConfig; file: string | undefined }> {
  const file = kubeconfig ?? env.KUBECONFIG?.split(":").find((f) => f && existsSync(f));
  const kc = await loadKubeConfig("--kubeconfig", file);
  if (!kc.getCurrentCluster()?.server)
    throw new ConfigError("no hub: pass --kubeconfig, set KUBECONFIG, or run in a pod of the hub");
  return { kc, file };
}

/** Load the hub kubeconfig as `kubectl` would, and read the ManagedProxyConfiguration. */
export async function connectHub(flags: HubFlags, env: NodeJS.ProcessEnv): Promise<Hub> {
  const { KubeApi, Resources } = await import("@cluster-proxy/addon-manager");
  const { kc } = await loadHubKubeConfig(flags.kubeconfig, env);
  const api = new KubeApi(kc);
  let stored: KubeObject | undefined;
  try {
    stored = await api.tryGet(Resources.managedProxyConfiguration, flags.configuration);
  } catch (err) {
    throw hubError(err, `reading ManagedProxyConfiguration ${flags.configuration}`);
  }
  if (!stored) {
    throw new CommandFailure(
      `--configuration: ManagedProxyConfiguration "${flags.configuration}" not found on the hub (is the addon installed?)`,
    );
  }
  // A chart-installed configuration sets few fields: the schema's defaults give the rest.
  return { api, mpc: managedProxyConfigurationFromApi(stored) };
}

/** `connectHub` once, on first use (commands given every flag never touch the hub). */
export function lazyHub(flags: HubFlags, env: NodeJS.ProcessEnv): () => Promise<Hub> {
  let hub: Promise<Hub> | undefined;
  return () => (hub ??= connectHub(flags, env));
}

/** A readable failure for a hub API error. */
export function hubError(err: unknown, what: string): CommandFailure {
  return new CommandFailure(`hub: ${what}: ${(err as Error).message}`, { cause: err });
}

interface ServiceObject extends KubeObject {
  spec?: {
    type?: string;
    selector?: Record<string, string>;
    ports?: { name?: string; port: number; targetPort?: number | string }[];
  };
  status?: { loadBalancer?: { ingress?: { ip?: string; hostname?: string }[] } };
}

/**
 * Where the door listening on `doorPort` in the proxy-server pods is reachable from here:
 * --proxy-server-host/--proxy-server-port, else the ingress of a LoadBalancer Service in the
 * proxy-server namespace whose port targets that door, else the in-cluster Service name (which
 * works from inside the hub).
 */
export async function findProxyEndpoint(
  hub: () => Promise<Hub>,
  flags: HubFlags,
  doorPort: number,
): Promise<ProxyEndpoint> {
  const e = await locateDoor(hub, flags, doorPort);
  // SNI carries no IP address (RFC 6066): an IP host is verified against the IP SANs instead.
  return e.servername && isIP(e.servername) === 0 ? e : { host: e.host, port: e.port };
}

async function locateDoor(getHub: () => Promise<Hub>, flags: HubFlags, doorPort: number): Promise<ProxyEndpoint> {
  const portFlag = flags.proxyServerPort === undefined ? undefined : Number(flags.proxyServerPort);
  if (portFlag !== undefined && !(Number.isInteger(portFlag) && portFlag > 0 && portFlag < 65536))
    throw new ConfigError(`--proxy-server-port: "${flags.proxyServerPort}" is not a port (1-65535)`);
  if (flags.proxyServerHost) {
    return {
      host: flags.proxyServerHost,
      port: portFlag ?? doorPort,
      servername: flags.proxyServerName ?? flags.proxyServerHost,
    };
  }
  const hub = await getHub();
  const ns = hub.mpc.spec.proxyServer.namespace;
  const inCluster = `${hub.mpc.spec.proxyServer.inClusterServiceName}.${ns}.svc`;
  const { Resources } = await import("@cluster-proxy/addon-manager");
  let services: ServiceObject[] = [];
  try {
    services = (await hub.api.list(Resources.service, { namespace: ns })).items;
  } catch {
    // Not allowed to list Services: fall back to the in-cluster name.
  }
  for (const svc of services) {
    if (
      svc.spec?.type !== "LoadBalancer" ||
      svc.spec.selector?.["proxy.open-cluster-management.io/component-name"] !== "proxy-server"
    )
      continue;
    const port = svc.spec.ports?.find((p) => (p.targetPort ?? p.port) === doorPort);
    const ingress = svc.status?.loadBalancer?.ingress?.[0];
    const host = ingress?.hostname ?? ingress?.ip;
    // Verified as the in-cluster Service name, which every serving certificate carries (the
    // LoadBalancer's address is in it only when added to additionalSANs).
    if (port && host) return { host, port: portFlag ?? port.port, servername: flags.proxyServerName ?? inCluster };
  }
  return { host: inCluster, port: portFlag ?? doorPort, servername: flags.proxyServerName ?? inCluster };
}

/** The contents of the file a flag names; a usage error naming the flag when it cannot be read. */
export function readFlagFile(flag: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new ConfigError(`${flag} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, {
      cause: err,
    });
  }
}

/**
 * The client certificate and proxy CA: from --proxy-ca-cert/--proxy-cert/--proxy-key, else (with
 * --in-cluster-proxy-cert-lookup) from the hub's `proxy-client` Secret (the name the
 * ManagedProxyConfiguration dumps it under), which the addon manager keeps signed by its client CA,
 * and the serving CA from `proxy-server-ca`.
 */
export async function proxyCredentials(getHub: () => Promise<Hub>, flags: HubFlags): Promise<ProxyCredentials> {
  const given = [flags.proxyCaCert, flags.proxyCert, flags.proxyKey].filter((f) => f !== undefined).length;
  if (given === 3)
    return {
      ca: readFlagFile("--proxy-ca-cert", flags.proxyCaCert!),
      cert: readFlagFile("--proxy-cert", flags.proxyCert!),
      key: readFlagFile("--proxy-key", flags.proxyKey!),
    };
  if (given > 0) throw new ConfigError("--proxy-ca-cert, --proxy-cert and --proxy-key go together");
  if (!flags.inClusterProxyCertLookup)
    throw new ConfigError(
      "no client certificate: pass --proxy-ca-cert, --proxy-cert and --proxy-key, or allow --in-cluster-proxy-cert-lookup",
    );
  const hub = await getHub();
  const { Resources } = await import("@cluster-proxy/addon-manager");
  const ns = hub.mpc.spec.proxyServer.namespace;
  const name = hub.mpc.spec.authentication.dump.secrets.signingProxyClientSecretName;
  type Secret = KubeObject & { data?: Record<string, string> };
  let secret: Secret | undefined;
  let serving: Secret | undefined;
  try {
    secret = await hub.api.tryGet<Secret>(Resources.secret, name, ns);
    serving = await hub.api.tryGet<Secret>(Resources.secret, SERVER_CA_SECRET, ns);
  } catch (err) {
    throw hubError(
      err,
      `reading Secrets ${ns}/${name} and ${ns}/${SERVER_CA_SECRET} (--in-cluster-proxy-cert-lookup; or pass the --proxy-* files)`,
    );
  }
  const field = (s: Secret | undefined, sName: string, k: string): Buffer => {
    const v = s?.data?.[k];
    if (!v) throw new CommandFailure(`hub: Secret ${ns}/${sName} has no ${k} yet (is the addon manager running?)`);
    return Buffer.from(v, "base64");
  };
  // The proxy-servers' serving CA: `proxy-server-ca` (the client Secret's ca.crt is the CA that
  // signed the client certificate, which verifies no server).
  return {
    ca: field(serving, SERVER_CA_SECRET, "ca.crt"),
    cert: field(secret, name, "tls.crt"),
    key: field(secret, name, "tls.key"),
  };
}

/** A ManagedCluster as far as these commands read it. */
export interface ManagedClusterObject extends KubeObject {
  spec?: { managedClusterClientConfigs?: { url?: string; caBundle?: string }[] };
}

/** The CA bundle (PEM) a ManagedCluster publishes for its kube-apiserver, or undefined. */
export function clusterCa(mc: ManagedClusterObject): Buffer | undefined {
  const b64 = mc.spec?.managedClusterClientConfigs?.find((c) => c.caBundle)?.caBundle;
  return b64 ? Buffer.from(b64, "base64") : undefined;
}
