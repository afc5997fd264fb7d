/**
 * `cluster-proxy credential`: the exec credential plugin of the ClusterProfile access provider
 * `cluster-proxy`, a short-lived hub token for the gateway's audience (or a token file kept fresh).
 * Guide: docs/guides/cluster-profile.md
 */
import { existsSync, readFileSync } from "node:fs";
import type { Command } from "commander";
import { ConfigError, GATEWAY_TOKEN_AUDIENCE } from "@cluster-proxy/api";
import { CommandFailure, type CliContext } from "../cli-context.js";
import {
  execCredential,
  jwtExpiry,
  parseExecInfo,
  parseServiceAccount,
  tokenRequest,
  tokenRequestStatus,
  tokenServiceAccount,
  type ExecInfo,
} from "../hub/exec-credential.js";
import { loadHubKubeConfig } from "../hub/hub-access.js";
import { credentialOptionsSchema, type CredentialOptions } from "../hub/hub-options.js";
import { registerOptionCommand } from "./option-command.js";
import { errorMessage } from "@cluster-proxy/errors";

/** Where a pod's own ServiceAccount token is mounted. */
export const IN_CLUSTER_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token";

const EXAMPLE = `
Examples (in a provider file of sigs.k8s.io/cluster-inventory-api/pkg/credentials, or a kubeconfig user):
  {"providers": [{"name": "cluster-proxy", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1",
    "command": "cluster-proxy", "args": ["credential"], "provideClusterInfo": true}}]}
  cluster-proxy credential                                       # in a hub pod: a token for its own ServiceAccount
  cluster-proxy credential --kubeconfig hub.kubeconfig --service-account team-a/fleet-reader
  cluster-proxy credential --token-file /var/run/oidc/id-token  # pass an OIDC ID token through

Prints an ExecCredential (client.authentication.k8s.io/v1, or v1beta1 when KUBERNETES_EXEC_INFO asks
for it) with the token and its expirationTimestamp. A TokenRequest needs "create" on
serviceaccounts/token for that ServiceAccount (its own: resourceNames [<name>]); the token is for the
audience ${GATEWAY_TOKEN_AUDIENCE} (the gateway's default --token-audiences), so the hub apiserver
itself refuses it: it is a gateway credential, not a hub API credential. The gateway lets the
ServiceAccount reach a cluster when hub RBAC allows it managedclusters/proxy with the cluster as
resource name.
`;

/** Register `cluster-proxy credential`. */
export function registerCredentialCommand(program: Command, ctx: CliContext): void {
  registerOptionCommand(program, ctx, {
    name: "credential",
    summary: "exec credential plugin: a short-lived hub token for the gateway (ClusterProfile access provider)",
    description:
      "An exec credential plugin (client.authentication.k8s.io/v1) for the ClusterProfile access provider cluster-proxy and for kubeconfigs that reach clusters through the gateway: prints an ExecCredential with a short-lived token the gateway accepts.",
    example: EXAMPLE,
    schema: credentialOptionsSchema,
    run: async (flags) => {
      const info = parseExecInfo(ctx.env.KUBERNETES_EXEC_INFO);
      const credential = flags.tokenFile
        ? fromFile(flags.tokenFile, info)
        : await fromTokenRequest(flags, info, ctx.env);
      ctx.stdout(`${JSON.stringify(credential)}\n`);
    },
  });
}

function forCluster(info: ExecInfo): string {
  return info.cluster ? ` (for cluster ${info.cluster})` : "";
}

function fromFile(file: string, info: ExecInfo): ReturnType<typeof execCredential> {
  let token: string;
  try {
    token = readFileSync(file, "utf8").trim();
  } catch (err) {
    throw new ConfigError(`--token-file: ${errorMessage(err)}`, { cause: err });
  }
  if (token === "") throw new CommandFailure(`--token-file ${file} is empty${forCluster(info)}`);
  return execCredential(info.apiVersion, token, jwtExpiry(token));
}

async function fromTokenRequest(
  flags: CredentialOptions,
  info: ExecInfo,
  env: NodeJS.ProcessEnv,
): Promise<ReturnType<typeof execCredential>> {
  const seconds = Math.floor(flags.expiration / 1000);
  const { KubeApi } = await import("@cluster-proxy/kube");
  const { kc, file } = await loadHubKubeConfig(flags.kubeconfig, env);
  const own = (): { namespace: string; name: string } | undefined => {
    const token = kc.getCurrentUser()?.token;
    if (token) return tokenServiceAccount(token);
    if (!file && existsSync(IN_CLUSTER_TOKEN_FILE))
      return tokenServiceAccount(readFileSync(IN_CLUSTER_TOKEN_FILE, "utf8").trim());
    return undefined;
  };
  const sa = flags.serviceAccount ? parseServiceAccount("--service-account", flags.serviceAccount) : own();
  if (!sa)
    throw new ConfigError(
      "--service-account: required unless the hub credentials are a ServiceAccount's token (in a pod, or a kubeconfig with one)",
    );
  const api = new KubeApi(kc);
  let answer: unknown;
  try {
    answer = await api.request(
      "POST",
      `/api/v1/namespaces/${sa.namespace}/serviceaccounts/${encodeURIComponent(sa.name)}/token`,
      tokenRequest(seconds, flags.audience.length > 0 ? flags.audience : [GATEWAY_TOKEN_AUDIENCE]),
    );
  } catch (err) {
    throw new CommandFailure(
      `TokenRequest for ServiceAccount ${sa.namespace}/${sa.name}${forCluster(info)}: ${errorMessage(err)}`,
      { cause: err },
    );
  }
  const issued = tokenRequestStatus(answer);
  if (!issued)
    throw new CommandFailure(`TokenRequest for ServiceAccount ${sa.namespace}/${sa.name}: the answer has no token`);
  return execCredential(info.apiVersion, issued.token, issued.expires ?? jwtExpiry(issued.token));
}
