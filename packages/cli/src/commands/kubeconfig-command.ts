/**
 * `cluster-proxy kubeconfig --cluster <name>`: a kubeconfig with which plain kubectl reaches a
 * managed cluster's kube-apiserver through the hub (see kubeconfig-builder.ts and
 * docs/guides/hub-operations.md), written with mode 0600. With `--gateway[=<url>]`: a kubeconfig
 * for the gateway instead, one context per cluster, with the caller's hub credentials
 * (gateway-kubeconfig.ts).
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { loadTlsFilesSync } from "@cluster-proxy/tunnel";
import { dirname, resolve } from "node:path";
import type { Command } from "commander";
import {
  CONNECT_DOOR_PORT,
  ConfigError,
  GATEWAY_PORT,
  GATEWAY_SERVICE,
  GATEWAY_SERVING_SECRET,
  HubResources,
} from "@cluster-proxy/api";
import type { KubeObject } from "@cluster-proxy/kube";
import { CommandFailure, type CliContext } from "../cli-context.js";
import {
  chooseDirectEndpoint,
  clusterCa,
  hubError,
  lazyHub,
  proxyCredentials,
  type Hub,
  type ManagedClusterObject,
} from "../hub/hub-access.js";
import { kubeconfigOptionsSchema, type KubeconfigOptions } from "../hub/hub-options.js";
import { registerOptionCommand } from "./option-command.js";
import {
  aggregatedGatewayCluster,
  buildGatewayKubeconfig,
  defaultGatewayUrl,
  directGatewayCluster,
  gatewayTlsServerName,
  parseGatewayRoute,
  parseGatewayUrl,
} from "../hub/gateway-kubeconfig.js";
import {
  buildKubeconfig,
  currentCluster,
  currentUser,
  hasClientCertificate,
  type KubeconfigCluster,
  type KubeconfigUser,
} from "../hub/kubeconfig-builder.js";
import {
  localCluster,
  localCredentials,
  localEndpoint,
  requireConfiguredHub,
  selectLocalHub,
} from "../up/local-hub.js";
import { errorMessage } from "@cluster-proxy/errors";

const EXAMPLE = `
Examples:
  cluster-proxy kubeconfig --cluster mc1 --token "$(cat mc1.token)" --output mc1.kubeconfig
  cluster-proxy relay &   # when the kubeconfig goes through the hub kube-apiserver (--via=apiserver, or auto without a direct route)
  cluster-proxy kubeconfig --cluster mc1 --credentials-from ~/.kube/mc1-oidc.kubeconfig -o mc1.kubeconfig
  cluster-proxy kubeconfig --cluster mc1 --managed-service-account my-msa -o mc1.kubeconfig
  kubectl --kubeconfig mc1.kubeconfig get namespaces
  cluster-proxy kubeconfig --gateway -o hub-clusters.kubeconfig   # every cluster, through the hub apiserver, as you
  kubectl --kubeconfig hub-clusters.kubeconfig --context mc1 get pods
  cluster-proxy kubeconfig --gateway=direct --cluster mc1 -o mc1.kubeconfig   # the gateway's Service, from inside the hub
  cluster-proxy kubeconfig --gateway=https://gateway.example.com:9092 --cluster mc1 -o mc1.kubeconfig
  cluster-proxy kubeconfig --cluster east --token demo-token-east -o .cluster-proxy/east.kubeconfig   # the local hub of "cluster-proxy up"

kubectl connects to the proxy-servers' HTTP CONNECT door (mTLS, the hub's proxy client
certificate), which opens a tunnel to mc1; inside it kubectl speaks TLS to mc1's kube-apiserver,
verified against the CA of mc1's ManagedCluster, and authenticates with the credentials you give:
never the hub's. Where the door is reachable from where kubectl runs (--proxy-server-host, or a
LoadBalancer Service exposing port ${CONNECT_DOOR_PORT} of the proxy-servers, whose address is in the
ManagedProxyConfiguration's additionalSANs) nothing else has to run. From a workstation that
reaches only the hub kube-apiserver (--via=apiserver, or auto finding no direct route) the proxy
URL is https://<cluster>:@127.0.0.1:<--relay-port>, and "cluster-proxy relay" must run beside
kubectl: it forwards that port through the hub kube-apiserver (pods/portforward) to a Ready
proxy-server's CONNECT door.

With --gateway, kubectl talks to the hub apiserver you already reach, at
<hub>/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/<cluster>/proxy (the gateway
as an aggregated API, chart value gateway.aggregatedApi.enabled), verified and authenticated as your
hub kubeconfig does it: its CA, and its current user (or --token / --credentials-from), whatever
kind (certificate, token, exec plugin). Your hub RBAC needs get (and create, update, patch, delete
as you use them) on clusters/proxy of gateway.proxy.open-cluster-management.io and on
managedclusters/proxy, both for the cluster by name.

With --gateway=direct or --gateway=<url>, kubectl talks to the gateway's own port (Service
cluster-proxy-addon-user, port 9092; reachable inside the hub, or where you expose it) at
https://<gateway>/<cluster>, verified with the serving CA of Secret cluster-proxy-gateway-serving
(tls-server-name set when the URL's host is not in its certificate), and the gateway authenticates
the user itself: a hub token or an exec plugin (OIDC); a client certificate only when the gateway
runs with --client-ca-file naming its CA (the chart does not set it).

Either way the hub decides, per cluster, whether you may use managedclusters/proxy, and the
cluster's own RBAC what you may do there (as cluster:hub:<you>).
`;

/** The options of `kubeconfig`, as the functions below read them. */
type KubeconfigFlags = KubeconfigOptions;

/** Register `kubeconfig` on `program`. */
export function registerKubeconfigCommand(program: Command, ctx: CliContext): void {
  registerOptionCommand(program, ctx, {
    name: "kubeconfig",
    summary: "write a kubeconfig that reaches a managed cluster through the hub",
    description:
      "Write a kubeconfig (mode 0600) with which unmodified kubectl reaches a managed cluster's kube-apiserver through the hub, TLS verified against the cluster's CA, with your own credentials for that cluster. With --gateway: a kubeconfig for the gateway, one context per cluster, with your hub credentials (each cluster's RBAC applies to you, impersonated).",
    example: EXAMPLE,
    schema: kubeconfigOptionsSchema,
    run: writeClusterKubeconfig,
  });

  async function writeClusterKubeconfig(flags: KubeconfigFlags): Promise<void> {
    if (flags.gateway !== undefined) {
      const doc = await gatewayKubeconfig(flags, ctx.env);
      await writeKubeconfig(ctx, flags.output, doc.kubeconfig, doc.summary);
      return;
    }
    if (flags.cluster === undefined)
      throw new ConfigError("--cluster: required (or --gateway, for every cluster through the gateway)");
    const cluster = flags.cluster;
    const relayPort = flags.relayPort;
    const ways = [flags.credentialsFrom, flags.token, flags.managedServiceAccount].filter((v) => v !== undefined);
    if (ways.length !== 1)
      throw new ConfigError(
        "credentials for the managed cluster: give exactly one of --credentials-from, --token, --managed-service-account (the hub's credentials are never used)",
      );
    if (flags.proxyServerName && flags.proxyServerName !== flags.proxyServerHost)
      throw new ConfigError(
        "--proxy-server-name: kubectl verifies the proxy-server by the proxy-url host; use a --proxy-server-host its certificate names",
      );
    const local = selectLocalHub(flags, ctx.cwd);
    if (local) localCluster(local, cluster);
    const hub = local
      ? (): Promise<Hub> =>
          Promise.reject(
            new ConfigError(
              "--managed-service-account: the local hub of cluster-proxy up has no ManagedServiceAccounts; use --token (its ready screen prints each cluster's)",
            ),
          )
      : requireConfiguredHub(lazyHub(flags, ctx.env), flags, ctx.env);
    const ca = flags.clusterCaCert
      ? loadTlsFilesSync({ ca: { flag: "--cluster-ca-cert", path: flags.clusterCaCert } }).ca
      : local
        ? loadTlsFilesSync({ ca: { flag: "the local hub's apiserver CA", path: local.files.apiserverCa } }).ca
        : await managedClusterCa(hub, cluster);
    const credentials = await userCredentials(hub, { ...flags, cluster });
    const direct = local ? localEndpoint(local, "connect") : await chooseDirectEndpoint(hub, flags, CONNECT_DOOR_PORT);
    const endpoint = direct ?? { host: "127.0.0.1", port: relayPort };
    const relay =
      direct === undefined
        ? `; through the hub kube-apiserver: keep "cluster-proxy relay${relayPort === CONNECT_DOOR_PORT ? "" : ` --port ${relayPort}`}" running beside kubectl`
        : "";
    const creds = local ? localCredentials(local) : await proxyCredentials(hub, flags);
    const kubeconfig = buildKubeconfig({
      cluster,
      proxy: { host: endpoint.host, port: endpoint.port },
      clusterCa: ca,
      proxyCa: creds.ca,
      proxyCert: creds.cert,
      proxyKey: creds.key,
      credentials,
    });
    await writeKubeconfig(
      ctx,
      flags.output,
      kubeconfig,
      (file) => `context ${cluster}; kubectl --kubeconfig ${file} get namespaces${relay}`,
    );
  }
}

/** Write `kubeconfig` to `output` (mode 0600) and say so with `summary`, or to standard output. */
async function writeKubeconfig(
  ctx: CliContext,
  output: string | undefined,
  kubeconfig: Record<string, unknown>,
  summary: (file: string) => string,
): Promise<void> {
  const { dumpYaml } = await import("@kubernetes/client-node");
  const text = dumpYaml(kubeconfig);
  if (!output) {
    ctx.stdout(text);
    return;
  }
  writeFileSync(output, text, { mode: 0o600 });
  chmodSync(output, 0o600); // an existing file keeps its mode on write
  ctx.stderr(`wrote ${output} (${summary(output)})\n`);
}

/** Flags that choose the CONNECT door or the local hub, which a gateway kubeconfig does not use. */
const DOOR_ONLY_FLAGS: [keyof KubeconfigFlags, string][] = [
  ["managedServiceAccount", "--managed-service-account"],
  ["clusterCaCert", "--cluster-ca-cert"],
  ["proxyServerHost", "--proxy-server-host"],
  ["proxyServerPort", "--proxy-server-port"],
  ["proxyServerName", "--proxy-server-name"],
  ["proxyCaCert", "--proxy-ca-cert"],
  ["proxyCert", "--proxy-cert"],
  ["proxyKey", "--proxy-key"],
  ["hubProfile", "--hub-profile"],
];

/**
 * The gateway kubeconfig: the clusters (--cluster, or every ManagedCluster), the gateway URL and
 * its serving CA from the hub, and the caller's hub credentials. Warns (in `summary`) when those
 * are a client certificate.
 */
async function gatewayKubeconfig(
  flags: KubeconfigFlags,
  env: NodeJS.ProcessEnv,
): Promise<{ kubeconfig: Record<string, unknown>; summary: (file: string) => string }> {
  const misplaced = DOOR_ONLY_FLAGS.filter(([k]) => flags[k] !== undefined).map(([, f]) => f);
  if (misplaced.length > 0)
    throw new ConfigError(`--gateway: ${misplaced.join(", ")} belong to the CONNECT door, not the gateway`);
  if (flags.token !== undefined && flags.credentialsFrom !== undefined)
    throw new ConfigError(
      "--gateway: give at most one of --token and --credentials-from (default: your hub kubeconfig's user)",
    );
  const route = parseGatewayRoute(flags.gateway ?? "aggregated");
  const user = await hubUser(flags, env);
  if (route.kind === "aggregated") return aggregatedKubeconfig(flags, env, user);
  const hub = await requireConfiguredHub(lazyHub(flags, env), flags, env)();
  const { KubeResources } = await import("@cluster-proxy/kube");
  const ns = hub.mpc.spec.proxyServer.namespace;
  let clusters: string[];
  let serving: (KubeObject & { data?: Record<string, string> }) | undefined;
  try {
    clusters = await gatewayClusters(hub, flags.cluster);
    serving = await hub.api.tryGet(KubeResources.secret, GATEWAY_SERVING_SECRET, ns);
  } catch (err) {
    if (err instanceof CommandFailure) throw err;
    throw hubError(err, `listing ManagedClusters and reading Secret ${ns}/${GATEWAY_SERVING_SECRET}`);
  }
  const current = flags.cluster ?? clusters[0]!;
  const contexts = `${clusters.length === 1 ? "context" : "contexts"} ${clusters.join(", ")}`;
  const ca = serving?.data?.["ca.crt"];
  if (!ca)
    throw new CommandFailure(
      `hub: Secret ${ns}/${GATEWAY_SERVING_SECRET} has no ca.crt yet (is an addon manager with the gateway running?)`,
    );
  const inCluster = `${GATEWAY_SERVICE}.${ns}.svc`;
  const gateway =
    (route.kind === "direct" ? route.url : undefined) ??
    parseGatewayUrl(defaultGatewayUrl(GATEWAY_SERVICE, ns, GATEWAY_PORT));
  const tlsServerName = gatewayTlsServerName(
    gateway,
    Buffer.from(serving?.data?.["tls.crt"] ?? "", "base64").toString("utf8"),
    inCluster,
  );
  const note = hasClientCertificate(user)
    ? "; the user is a client certificate: the gateway accepts it only when run with --client-ca-file naming its CA, else use --token or --credentials-from"
    : "";
  return {
    kubeconfig: buildGatewayKubeconfig({
      cluster: directGatewayCluster(gateway, Buffer.from(ca, "base64"), tlsServerName),
      clusters,
      currentContext: current,
      user,
    }),
    summary: (file) =>
      `${contexts} through ${gateway.href.replace(/\/$/, "")}; kubectl --kubeconfig ${file} --context ${current} get namespaces${note}`,
  };
}

/** --cluster (checked to exist), else every ManagedCluster, sorted; hub errors are thrown as they are. */
async function gatewayClusters(hub: Hub, cluster: string | undefined): Promise<string[]> {
  if (cluster !== undefined) {
    if (!(await hub.api.tryGet(HubResources.managedCluster, cluster)))
      throw new CommandFailure(`--cluster: no ManagedCluster named ${cluster}`);
    return [cluster];
  }
  const clusters = (await hub.api.list(HubResources.managedCluster)).items.map((c) => c.metadata.name).sort();
  if (clusters.length === 0) throw new CommandFailure("no ManagedCluster on the hub: nothing to reach");
  return clusters;
}

/**
 * The aggregated path's kubeconfig: the hub kubeconfig's cluster at each cluster's path. With
 * --cluster nothing is read from the hub (a user who may only reach that cluster can write it);
 * without, the ManagedClusters are listed with the hub kubeconfig's rights.
 */
async function aggregatedKubeconfig(
  flags: KubeconfigFlags,
  env: NodeJS.ProcessEnv,
  user: KubeconfigUser,
): Promise<{ kubeconfig: Record<string, unknown>; summary: (file: string) => string }> {
  const hubCluster = await hubKubeconfigCluster(flags, env);
  let clusters: string[];
  if (flags.cluster !== undefined) clusters = [flags.cluster];
  else {
    const hub = await requireConfiguredHub(lazyHub(flags, env), flags, env)();
    try {
      clusters = await gatewayClusters(hub, undefined);
    } catch (err) {
      if (err instanceof CommandFailure) throw err;
      throw hubError(err, "listing ManagedClusters (or name one with --cluster, which reads nothing from the hub)");
    }
  }
  const current = flags.cluster ?? clusters[0]!;
  return {
    kubeconfig: buildGatewayKubeconfig({
      cluster: aggregatedGatewayCluster(hubCluster),
      clusters,
      currentContext: current,
      user,
    }),
    summary: (file) =>
      `${clusters.length === 1 ? "context" : "contexts"} ${clusters.join(", ")} through the hub apiserver ${hubCluster.server} (the gateway's aggregated API); kubectl --kubeconfig ${file} --context ${current} get namespaces`,
  };
}

/** Service account files a pod's token is read from (in-cluster hub access). */
const IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/** The CA bundle of the in-cluster apiserver, beside it. */
const IN_CLUSTER_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/** The hub kubeconfig file (--kubeconfig, else the first existing KUBECONFIG file) and how to name it. */
function hubKubeconfigFile(flags: KubeconfigFlags, env: NodeJS.ProcessEnv): [string, string] | undefined {
  if (flags.kubeconfig !== undefined) return [flags.kubeconfig, `--kubeconfig ${flags.kubeconfig}`];
  const f = env.KUBECONFIG?.split(":").find((p) => p && existsSync(p));
  return f ? [f, `KUBECONFIG file ${f}`] : undefined;
}

/**
 * The hub apiserver as the hub kubeconfig reaches it (the aggregated path's server and how to
 * verify it), else the in-cluster apiserver.
 */
async function hubKubeconfigCluster(flags: KubeconfigFlags, env: NodeJS.ProcessEnv): Promise<KubeconfigCluster> {
  const hubFile = hubKubeconfigFile(flags, env);
  if (!hubFile) return { server: "https://kubernetes.default.svc", "certificate-authority": IN_CLUSTER_CA };
  return readKubeconfig(hubFile[0], hubFile[1], (doc, baseDir) => currentCluster(doc, hubFile[1], baseDir));
}

/**
 * The caller's hub credentials for the gateway: --token, the current user of --credentials-from,
 * else of the hub kubeconfig (--kubeconfig, else the first existing KUBECONFIG file), else the
 * pod's service account token.
 */
async function hubUser(flags: KubeconfigFlags, env: NodeJS.ProcessEnv): Promise<KubeconfigUser> {
  if (flags.token !== undefined) {
    if (!flags.token.trim()) throw new ConfigError("--token: empty");
    return { token: flags.token.trim() };
  }
  const from: [string, string] | undefined =
    flags.credentialsFrom !== undefined
      ? [flags.credentialsFrom, `--credentials-from ${flags.credentialsFrom}`]
      : hubKubeconfigFile(flags, env);
  if (from === undefined) return { tokenFile: IN_CLUSTER_TOKEN };
  return readCurrentUser(from[0], from[1], { allowCertificate: true });
}

/** The current user of the kubeconfig `file` (a usage error naming `source` when unreadable). */
function readCurrentUser(
  file: string,
  source: string,
  options: { allowCertificate?: boolean } = {},
): Promise<KubeconfigUser> {
  return readKubeconfig(file, source, (doc, baseDir) => currentUser(doc, source, baseDir, options));
}

/**
 * What `pick` takes from the kubeconfig `file` (its parsed document and directory); an unreadable
 * file or what `pick` throws is a usage error naming `source`.
 */
async function readKubeconfig<T>(file: string, source: string, pick: (doc: unknown, baseDir: string) => T): Promise<T> {
  const path = resolve(file);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`${source}: ${(err as NodeJS.ErrnoException).code}`, { cause: err });
  }
  const { loadYaml } = await import("@kubernetes/client-node");
  try {
    return pick(loadYaml(text), dirname(path));
  } catch (err) {
    throw new ConfigError(errorMessage(err), { cause: err });
  }
}

/** The CA bundle of `cluster`'s kube-apiserver, from its ManagedCluster. */
async function managedClusterCa(getHub: () => Promise<Hub>, cluster: string): Promise<Buffer> {
  const hub = await getHub();

  let mc: ManagedClusterObject | undefined;
  try {
    mc = await hub.api.tryGet<ManagedClusterObject>(HubResources.managedCluster, cluster);
  } catch (err) {
    throw hubError(err, `reading ManagedCluster ${cluster}`);
  }
  if (!mc) throw new CommandFailure(`--cluster: no ManagedCluster named ${cluster}`);
  const ca = clusterCa(mc);
  if (!ca)
    throw new CommandFailure(
      `ManagedCluster ${cluster} publishes no spec.managedClusterClientConfigs[].caBundle: its apiserver cannot be verified (or pass --cluster-ca-cert)`,
    );
  return ca;
}

async function userCredentials(
  getHub: () => Promise<Hub>,
  flags: KubeconfigFlags & { cluster: string },
): Promise<KubeconfigUser> {
  if (flags.token !== undefined) {
    if (!flags.token.trim()) throw new ConfigError("--token: empty");
    return { token: flags.token.trim() };
  }
  if (flags.credentialsFrom !== undefined)
    return readCurrentUser(flags.credentialsFrom, `--credentials-from ${flags.credentialsFrom}`);
  const name = flags.managedServiceAccount!;
  const hub = await getHub();
  const { KubeResources } = await import("@cluster-proxy/kube");
  let secret: (KubeObject & { data?: Record<string, string> }) | undefined;
  try {
    secret = await hub.api.tryGet(KubeResources.secret, name, flags.cluster);
  } catch (err) {
    throw hubError(err, `reading the ManagedServiceAccount token Secret ${flags.cluster}/${name}`);
  }
  const token = secret?.data?.token;
  if (!token)
    throw new CommandFailure(
      `--managed-service-account: no token in Secret ${flags.cluster}/${name} on the hub (is the ManagedServiceAccount ${name} ready?)`,
    );
  return { token: Buffer.from(token, "base64").toString("utf8") };
}
