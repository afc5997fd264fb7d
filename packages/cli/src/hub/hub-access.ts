/**
 * What the hub operations (`health`, `kubeconfig`, `port-forward`) need from the hub: its
 * kubeconfig (--kubeconfig, KUBECONFIG, or in-cluster), the ManagedProxyConfiguration, where its
 * proxy-server front doors are reachable, the client certificate to present there, and each
 * ManagedCluster's CA. Flags are clusteradm's names (`clusteradm proxy health`).
 */
import { existsSync } from "node:fs";
import { isIP } from "node:net";
import type { KubeConfig } from "@kubernetes/client-node";
import type { KubeApi, KubeObject } from "@cluster-proxy/kube";
import {
  COMPONENT_LABEL,
  ConfigError,
  PROXY_SERVER_COMPONENT,
  SERVER_CA_SECRET,
  managedProxyConfigurationFromApi,
  type ManagedProxyConfiguration,
  HubResources,
} from "@cluster-proxy/api";
import { CommandFailure } from "../cli-context.js";
import { errorMessage } from "@cluster-proxy/errors";
import { loadTlsFilesSync } from "@cluster-proxy/tunnel";

/** The hub-access options (their flags: hub-options.ts). */
export interface HubFlags {
  kubeconfig?: string;
  configuration: string;
  proxyServerHost?: string;
  proxyServerPort?: number;
  proxyServerName?: string;
  inClusterProxyCertLookup: boolean;
  proxyCaCert?: string;
  proxyCert?: string;
  proxyKey?: string;
  via: string;
}

/** How the hub operations reach the proxy-servers (`--via`). */
export const VIA_CHOICES = ["auto", "apiserver", "direct"] as const;
export type Via = (typeof VIA_CHOICES)[number];

/** The `--via` value, checked; a usage error naming the flag otherwise. */
export function parseVia(text: string): Via {
  const via = VIA_CHOICES.find((v) => v === text);
  if (!via) throw new ConfigError(`--via: "${text}" is not one of ${VIA_CHOICES.join(", ")}`);
  return via;
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
  /** The hub kubeconfig (for port-forwards through its kube-apiserver). */
  kc: KubeConfig;
  /** The hub was loaded from the pod's in-cluster configuration (Service names resolve here). */
  inCluster: boolean;
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
    throw new ConfigError(`${flag} ${file ?? "(in-cluster)"}: ${errorMessage(err)}`, { cause: err });
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
  const { KubeApi } = await import("@cluster-proxy/kube");
  const { kc, file } = await loadHubKubeConfig(flags.kubeconfig, env);
  const api = new KubeApi(kc);
  let stored: KubeObject | undefined;
  try {
    stored = await api.tryGet(HubResources.managedProxyConfiguration, flags.configuration);
  } catch (err) {
    throw hubError(err, `reading ManagedProxyConfiguration ${flags.configuration}`);
  }
  if (!stored) {
    throw new CommandFailure(
      `--configuration: ManagedProxyConfiguration "${flags.configuration}" not found on the hub (is the addon installed?)`,
    );
  }
  // A chart-installed configuration sets few fields: the schema's defaults give the rest.
  return { api, mpc: managedProxyConfigurationFromApi(stored), kc, inCluster: file === undefined };
}

/** `connectHub` once, on first use (commands given every flag never touch the hub). */
export function lazyHub(flags: HubFlags, env: NodeJS.ProcessEnv): () => Promise<Hub> {
  let hub: Promise<Hub> | undefined;
  return () => (hub ??= connectHub(flags, env));
}

/** A readable failure for a hub API error. */
export function hubError(err: unknown, what: string): CommandFailure {
  return new CommandFailure(`hub: ${what}: ${errorMessage(err)}`, { cause: err });
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
  return withServername((await locateDoor(hub, flags, doorPort)).endpoint);
}

/** SNI carries no IP address (RFC 6066): an IP host is verified against the IP SANs instead. */
function withServername(e: ProxyEndpoint): ProxyEndpoint {
  return e.servername && isIP(e.servername) === 0 ? e : { host: e.host, port: e.port };
}

/** How a door was located: a flag, a LoadBalancer Service, or the in-cluster Service name. */
type DoorSource = "flag" | "loadbalancer" | "service";

async function locateDoor(
  getHub: () => Promise<Hub>,
  flags: HubFlags,
  doorPort: number,
): Promise<{ endpoint: ProxyEndpoint; source: DoorSource }> {
  const portFlag = flags.proxyServerPort;
  if (flags.proxyServerHost) {
    return {
      source: "flag",
      endpoint: {
        host: flags.proxyServerHost,
        port: portFlag ?? doorPort,
        servername: flags.proxyServerName ?? flags.proxyServerHost,
      },
    };
  }
  const hub = await getHub();
  const ns = hub.mpc.spec.proxyServer.namespace;
  const inCluster = `${hub.mpc.spec.proxyServer.inClusterServiceName}.${ns}.svc`;
  const { KubeResources } = await import("@cluster-proxy/kube");
  let services: ServiceObject[] = [];
  try {
    services = (await hub.api.list(KubeResources.service, { namespace: ns })).items;
  } catch {
    // Not allowed to list Services: fall back to the in-cluster name.
  }
  for (const svc of services) {
    if (svc.spec?.type !== "LoadBalancer" || svc.spec.selector?.[COMPONENT_LABEL] !== PROXY_SERVER_COMPONENT) continue;
    const port = svc.spec.ports?.find((p) => (p.targetPort ?? p.port) === doorPort);
    const ingress = svc.status?.loadBalancer?.ingress?.[0];
    const host = ingress?.hostname ?? ingress?.ip;
    // Verified as the in-cluster Service name, which every serving certificate carries (the
    // LoadBalancer's address is in it only when added to additionalSANs).
    if (port && host)
      return {
        source: "loadbalancer",
        endpoint: { host, port: portFlag ?? port.port, servername: flags.proxyServerName ?? inCluster },
      };
  }
  return {
    source: "service",
    endpoint: { host: inCluster, port: portFlag ?? doorPort, servername: flags.proxyServerName ?? inCluster },
  };
}

/** How long `--via=auto` waits for the in-cluster Service name to resolve before going through the apiserver. */
export const SERVICE_LOOKUP_MS = 2_000;

/** Whether `host` resolves here within `timeoutMs`. */
export async function resolves(host: string, timeoutMs: number): Promise<boolean> {
  const { lookup } = await import("node:dns/promises");
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([
      lookup(host).then(
        () => true,
        () => false,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The way to a proxy-server door that the hub operations use. */
export interface ProxyRoute {
  /** Where the TLS client connects (a loopback relay for the apiserver route). */
  endpoint: ProxyEndpoint;
  /** `direct` or `apiserver`, as `health -o wide` shows it. */
  via: Exclude<Via, "auto">;
  /** For messages: `direct to <host:port>` or `apiserver port-forward to <ns>/<pod>:<port>`. */
  describe(): string;
  close(): Promise<void>;
}

/**
 * The route to the door listening on `doorPort` in the proxy-server pods, as `--via` says: direct
 * (findProxyEndpoint), or a loopback relay that port-forwards each connection through the hub
 * kube-apiserver to a Ready proxy-server pod (apiserver-route.ts), verified as the in-cluster
 * Service name (which every serving certificate carries). With auto: direct when the door was
 * given (--proxy-server-host), found (a LoadBalancer Service) or its Service name resolves here
 * (in a pod of the hub), else the apiserver.
 */
export async function openProxyRoute(
  getHub: () => Promise<Hub>,
  flags: HubFlags,
  doorPort: number,
  options: { listen?: { host?: string; port?: number }; timeoutMs?: number; onError?: (message: string) => void } = {},
): Promise<ProxyRoute> {
  const direct = await chooseDirectEndpoint(getHub, flags, doorPort);
  if (direct) {
    return {
      endpoint: direct,
      via: "direct",
      describe: () => `direct to ${direct.host}:${direct.port}`,
      close: () => Promise.resolve(),
    };
  }
  return openApiserverRoute(getHub, flags, doorPort, options);
}

/**
 * The direct endpoint of the door when --via allows and (with auto) finds one, or undefined when
 * the way is through the hub kube-apiserver (see openProxyRoute). A usage error names --via.
 */
export async function chooseDirectEndpoint(
  getHub: () => Promise<Hub>,
  flags: HubFlags,
  doorPort: number,
): Promise<ProxyEndpoint | undefined> {
  const via = parseVia(flags.via);
  if (via === "apiserver" && flags.proxyServerHost !== undefined)
    throw new ConfigError("--via=apiserver: --proxy-server-host names a direct route; give one or the other");
  if (via === "apiserver" && flags.proxyServerPort !== undefined)
    throw new ConfigError(
      "--via=apiserver: --proxy-server-port is the port of a direct route; the port-forward goes to the door's port in the pod",
    );
  if (via === "apiserver") return undefined;
  const door = await locateDoor(getHub, flags, doorPort);
  const usable =
    via === "direct" ||
    door.source !== "service" ||
    (await getHub()).inCluster ||
    (await resolves(door.endpoint.host, SERVICE_LOOKUP_MS));
  return usable ? withServername(door.endpoint) : undefined;
}

/** A loopback relay to the door through the hub kube-apiserver (apiserver-route.ts), as a route. */
export async function openApiserverRoute(
  getHub: () => Promise<Hub>,
  flags: Pick<HubFlags, "proxyServerName">,
  doorPort: number,
  options: {
    listen?: { host?: string; port?: number };
    timeoutMs?: number;
    onError?: (message: string) => void;
    /** The pods to forward to (default: the proxy-servers). */
    selector?: string;
  } = {},
): Promise<ProxyRoute> {
  const hub = await getHub();
  const ns = hub.mpc.spec.proxyServer.namespace;
  const { ApiserverRelay } = await import("./apiserver-route.js");
  const relay = await ApiserverRelay.start({
    kc: hub.kc,
    api: hub.api,
    namespace: ns,
    port: doorPort,
    timeoutMs: options.timeoutMs ?? 30_000,
    ...(options.listen ? { listen: options.listen } : {}),
    ...(options.onError ? { onError: options.onError } : {}),
    ...(options.selector ? { selector: options.selector } : {}),
  });
  const servername = flags.proxyServerName ?? `${hub.mpc.spec.proxyServer.inClusterServiceName}.${ns}.svc`;
  return {
    endpoint: { host: options.listen?.host ?? "127.0.0.1", port: relay.port, servername },
    via: "apiserver",
    describe: () => `apiserver port-forward to ${ns}/${relay.pod ?? "?"}:${doorPort}`,
    close: () => relay.close(),
  };
}

/**
 * The client certificate and proxy CA: from --proxy-ca-cert/--proxy-cert/--proxy-key, else (with
 * --in-cluster-proxy-cert-lookup) from the hub's `proxy-client` Secret (the name the
 * ManagedProxyConfiguration dumps it under), which the addon manager keeps signed by its client CA,
 * and the serving CA from `proxy-server-ca`.
 */
export async function proxyCredentials(getHub: () => Promise<Hub>, flags: HubFlags): Promise<ProxyCredentials> {
  const given = [flags.proxyCaCert, flags.proxyCert, flags.proxyKey].filter((f) => f !== undefined).length;
  if (flags.proxyCaCert !== undefined && flags.proxyCert !== undefined && flags.proxyKey !== undefined)
    return loadTlsFilesSync({
      ca: { flag: "--proxy-ca-cert", path: flags.proxyCaCert },
      cert: { flag: "--proxy-cert", path: flags.proxyCert },
      key: { flag: "--proxy-key", path: flags.proxyKey },
    });
  if (given > 0) throw new ConfigError("--proxy-ca-cert, --proxy-cert and --proxy-key go together");
  if (!flags.inClusterProxyCertLookup)
    throw new ConfigError(
      "no client certificate: pass --proxy-ca-cert, --proxy-cert and --proxy-key, or allow --in-cluster-proxy-cert-lookup",
    );
  const hub = await getHub();
  const { KubeResources } = await import("@cluster-proxy/kube");
  const ns = hub.mpc.spec.proxyServer.namespace;
  const name = hub.mpc.spec.authentication.dump.secrets.signingProxyClientSecretName;
  type Secret = KubeObject & { data?: Record<string, string> };
  let secret: Secret | undefined;
  let serving: Secret | undefined;
  try {
    secret = await hub.api.tryGet<Secret>(KubeResources.secret, name, ns);
    serving = await hub.api.tryGet<Secret>(KubeResources.secret, SERVER_CA_SECRET, ns);
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
