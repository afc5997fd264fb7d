/**
 * `cluster-proxy kubeconfig --cluster <name>`: a kubeconfig with which plain kubectl reaches a
 * managed cluster's kube-apiserver through the hub (see kubeconfig-builder.ts and
 * docs/guides/hub-operations.md), written with mode 0600.
 */
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { Command } from "commander";
import { clusterNameProblem } from "@cluster-proxy/api";
import type { KubeObject } from "@cluster-proxy/addon-manager";
import { ConfigError } from "@cluster-proxy/api";
import { CommandFailure, type CliContext } from "./cli-context.js";
import {
  CONNECT_DOOR_PORT,
  addHubFlags,
  clusterCa,
  findProxyEndpoint,
  hubError,
  lazyHub,
  proxyCredentials,
  readFlagFile,
  type Hub,
  type HubFlags,
  type ManagedClusterObject,
} from "./hub-access.js";
import { buildKubeconfig, currentUser, type KubeconfigUser } from "./kubeconfig-builder.js";
import {
  addLocalHubFlag,
  localCluster,
  localCredentials,
  localEndpoint,
  requireConfiguredHub,
  selectLocalHub,
} from "./local-hub.js";

const EXAMPLE = `
Examples:
  cluster-proxy kubeconfig --cluster mc1 --token "$(cat mc1.token)" --output mc1.kubeconfig
  cluster-proxy kubeconfig --cluster mc1 --credentials-from ~/.kube/mc1-oidc.kubeconfig -o mc1.kubeconfig
  cluster-proxy kubeconfig --cluster mc1 --managed-service-account my-msa -o mc1.kubeconfig
  kubectl --kubeconfig mc1.kubeconfig get namespaces
  cluster-proxy kubeconfig --cluster east --token demo-token-east -o .cluster-proxy/east.kubeconfig   # the local hub of "cluster-proxy up"

kubectl connects to the proxy-servers' HTTP CONNECT door (mTLS, the hub's proxy client
certificate), which opens a tunnel to mc1; inside it kubectl speaks TLS to mc1's kube-apiserver,
verified against the CA of mc1's ManagedCluster, and authenticates with the credentials you give:
never the hub's. Nothing else has to run. The door must be reachable from where kubectl runs
(--proxy-server-host, or a LoadBalancer Service exposing port ${CONNECT_DOOR_PORT} of the proxy-servers,
whose address is in the ManagedProxyConfiguration's additionalSANs).
`;

interface KubeconfigFlags extends HubFlags {
  cluster: string;
  credentialsFrom?: string;
  token?: string;
  managedServiceAccount?: string;
  output?: string;
  clusterCaCert?: string;
  hubProfile?: string;
}

/** Register `kubeconfig` on `program`. */
export function registerKubeconfigCommand(program: Command, ctx: CliContext): void {
  const command = program
    .command("kubeconfig")
    .summary("write a kubeconfig that reaches a managed cluster through the hub")
    .description(
      "Write a kubeconfig (mode 0600) with which unmodified kubectl reaches a managed cluster's kube-apiserver through the hub, TLS verified against the cluster's CA, with your own credentials for that cluster.",
    )
    .addHelpText("after", EXAMPLE)
    .requiredOption("--cluster <name>", "the managed cluster")
    .option("--credentials-from <kubeconfig>", "copy the current user of this kubeconfig (token, exec plugin, ...)")
    .option("--token <token>", "a bearer token for the managed cluster")
    .option(
      "--managed-service-account <name>",
      "use the token of this ManagedServiceAccount (hub Secret <name> in the cluster's namespace)",
    )
    .option("-o, --output <file>", "write here (mode 0600) instead of standard output")
    .option(
      "--cluster-ca-cert <file>",
      "CA bundle of the cluster's kube-apiserver (default: from its ManagedCluster); with --proxy-server-host and the --proxy-* files no hub is read",
    );
  addHubFlags(command, "connect");
  addLocalHubFlag(command);
  command.action(async () => {
    const flags = command.opts<KubeconfigFlags>();
    const badName = clusterNameProblem(flags.cluster);
    if (badName !== undefined) throw new ConfigError(`--cluster: ${badName}`);
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
    if (local) localCluster(local, flags.cluster);
    const hub = local
      ? (): Promise<Hub> =>
          Promise.reject(
            new ConfigError(
              "--managed-service-account: the local hub of cluster-proxy up has no ManagedServiceAccounts; use --token (its ready screen prints each cluster's)",
            ),
          )
      : requireConfiguredHub(lazyHub(flags, ctx.env), flags, ctx.env);
    const ca = flags.clusterCaCert
      ? readFlagFile("--cluster-ca-cert", flags.clusterCaCert)
      : local
        ? readFlagFile("the local hub's apiserver CA", local.files.apiserverCa)
        : await managedClusterCa(hub, flags.cluster);
    const credentials = await userCredentials(hub, flags);
    const endpoint = local ? localEndpoint(local, "connect") : await findProxyEndpoint(hub, flags, CONNECT_DOOR_PORT);
    const creds = local ? localCredentials(local) : await proxyCredentials(hub, flags);
    const { dumpYaml } = await import("@kubernetes/client-node");
    const text = dumpYaml(
      buildKubeconfig({
        cluster: flags.cluster,
        proxy: { host: endpoint.host, port: endpoint.port },
        clusterCa: ca,
        proxyCa: creds.ca,
        proxyCert: creds.cert,
        proxyKey: creds.key,
        credentials,
      }),
    );
    if (!flags.output) {
      ctx.stdout(text);
      return;
    }
    writeFileSync(flags.output, text, { mode: 0o600 });
    chmodSync(flags.output, 0o600); // an existing file keeps its mode on write
    ctx.stderr(
      `wrote ${flags.output} (context ${flags.cluster}; kubectl --kubeconfig ${flags.output} get namespaces)\n`,
    );
  });
}

/** The CA bundle of `cluster`'s kube-apiserver, from its ManagedCluster. */
async function managedClusterCa(getHub: () => Promise<Hub>, cluster: string): Promise<Buffer> {
  const hub = await getHub();
  const { Resources } = await import("@cluster-proxy/addon-manager");
  let mc: ManagedClusterObject | undefined;
  try {
    mc = await hub.api.tryGet<ManagedClusterObject>(Resources.managedCluster, cluster);
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

async function userCredentials(getHub: () => Promise<Hub>, flags: KubeconfigFlags): Promise<KubeconfigUser> {
  if (flags.token !== undefined) {
    if (!flags.token.trim()) throw new ConfigError("--token: empty");
    return { token: flags.token.trim() };
  }
  if (flags.credentialsFrom !== undefined) {
    const file = resolve(flags.credentialsFrom);
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      throw new ConfigError(`--credentials-from ${flags.credentialsFrom}: ${(err as NodeJS.ErrnoException).code}`, {
        cause: err,
      });
    }
    const { loadYaml } = await import("@kubernetes/client-node");
    try {
      return currentUser(loadYaml(text), `--credentials-from ${flags.credentialsFrom}`, dirname(file));
    } catch (err) {
      throw new ConfigError((err as Error).message, { cause: err });
    }
  }
  const name = flags.managedServiceAccount!;
  const hub = await getHub();
  const { Resources } = await import("@cluster-proxy/addon-manager");
  let secret: (KubeObject & { data?: Record<string, string> }) | undefined;
  try {
    secret = await hub.api.tryGet(Resources.secret, name, flags.cluster);
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
