/**
 * The kubeconfig `cluster-proxy kubeconfig` writes: kubectl reaches the cluster through the proxy-server's
 * mTLS HTTP CONNECT door (`proxy-url https://<cluster>:@<door>`), with the user's own cluster credentials.
 * Guide: docs/guides/hub-operations.md#cluster-proxy-kubeconfig---cluster-name
 */
import { join } from "node:path";

/** A kubeconfig `user` entry as kubectl reads it (only the fields this module looks at are typed). */
export type KubeconfigUser = Record<string, unknown>;

/** What a kubeconfig for one cluster through the hub is made of. */
export interface KubeconfigInput {
  cluster: string;
  /** The proxy-servers' HTTP CONNECT door. */
  proxy: { host: string; port: number };
  /** PEM: the managed cluster's CA (from its ManagedCluster) and the proxy-servers' CA. */
  clusterCa: Buffer;
  proxyCa: Buffer;
  /** The hub client certificate for the door (PEM). */
  proxyCert: Buffer;
  proxyKey: Buffer;
  /** The user's own credentials for the managed cluster. */
  credentials: KubeconfigUser;
}

/** Fields of a user entry that are client certificates (they cannot travel through the hub). */
export const CERTIFICATE_FIELDS = ["client-certificate", "client-certificate-data", "client-key", "client-key-data"];

const b64 = (b: Buffer): string => b.toString("base64");
const withNewline = (b: Buffer): Buffer =>
  b.length && b[b.length - 1] !== 0x0a ? Buffer.concat([b, Buffer.from("\n")]) : b;

/** The kubeconfig document (for `dumpYaml`). */
export function buildKubeconfig(input: KubeconfigInput): Record<string, unknown> {
  const host = input.proxy.host.includes(":") ? `[${input.proxy.host}]` : input.proxy.host;
  const user = `${input.cluster}-via-hub`;
  return {
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: input.cluster,
        cluster: {
          server: "https://kubernetes.default.svc",
          "proxy-url": `https://${input.cluster}:@${host}:${input.proxy.port}`,
          "certificate-authority-data": b64(Buffer.concat([withNewline(input.clusterCa), withNewline(input.proxyCa)])),
        },
      },
    ],
    users: [
      {
        name: user,
        user: {
          ...input.credentials,
          "client-certificate-data": b64(input.proxyCert),
          "client-key-data": b64(input.proxyKey),
        },
      },
    ],
    contexts: [{ name: input.cluster, context: { cluster: input.cluster, user } }],
    "current-context": input.cluster,
  };
}

/** A kubeconfig document as read from YAML (loosely typed). */
interface KubeconfigDoc {
  "current-context"?: string;
  contexts?: { name: string; context?: { user?: string; cluster?: string } }[];
  users?: { name: string; user?: KubeconfigUser }[];
  clusters?: { name: string; cluster?: Record<string, unknown> }[];
}

/** A kubeconfig `cluster` entry: `server` and how to verify it (CA, tls-server-name, proxy-url, ...). */
export type KubeconfigCluster = Record<string, unknown> & { server: string };

/**
 * The current context's cluster of a kubeconfig (the hub apiserver of a hub kubeconfig), with a
 * relative `certificate-authority` made absolute against `baseDir`. Throws with a user-facing
 * message naming `source` when it has none.
 */
export function currentCluster(doc: unknown, source: string, baseDir: string): KubeconfigCluster {
  const kc = (doc ?? {}) as KubeconfigDoc;
  const context = kc.contexts?.find((c) => c.name === kc["current-context"]);
  const name = context?.context?.cluster;
  if (!name) throw new Error(`${source}: no current context with a cluster`);
  const entry = kc.clusters?.find((c) => c.name === name)?.cluster;
  const server = entry?.server;
  if (!entry || typeof server !== "string" || server === "")
    throw new Error(`${source}: cluster "${name}" has no server`);
  const cluster: KubeconfigCluster = { ...entry, server };
  const ca = cluster["certificate-authority"];
  if (typeof ca === "string" && ca !== "" && !ca.startsWith("/")) cluster["certificate-authority"] = join(baseDir, ca);
  return cluster;
}

/** A kubeconfig user that authenticates with a client certificate (one of {@link CERTIFICATE_FIELDS}). */
export function hasClientCertificate(user: KubeconfigUser): boolean {
  return CERTIFICATE_FIELDS.some((f) => f in user);
}

/**
 * The current context's user of a kubeconfig, to carry into the generated one. Relative file
 * paths (`tokenFile`, exec `command`, and with `allowCertificate` `client-certificate` and
 * `client-key`) are made absolute against `baseDir`. Throws with a user-facing message when it has
 * none, or when it authenticates with a client certificate and `allowCertificate` is not set
 * (through the CONNECT door a certificate cannot reach the cluster).
 */
export function currentUser(
  doc: unknown,
  source: string,
  baseDir: string,
  options: { allowCertificate?: boolean } = {},
): KubeconfigUser {
  const kc = (doc ?? {}) as KubeconfigDoc;
  const ctxName = kc["current-context"];
  const context = kc.contexts?.find((c) => c.name === ctxName);
  if (!context?.context?.user) throw new Error(`${source}: no current context with a user`);
  const entry = kc.users?.find((u) => u.name === context.context!.user);
  if (!entry?.user) throw new Error(`${source}: user "${context.context.user}" is not defined`);
  const user = { ...entry.user };
  if (!options.allowCertificate && hasClientCertificate(user)) {
    throw new Error(
      `${source}: user "${entry.name}" authenticates with a client certificate; through the hub kubectl presents the hub's proxy client certificate in every TLS session (Go uses one TLS configuration for the proxy and the cluster), so use --token or --managed-service-account for this cluster`,
    );
  }
  // kubectl resolves a relative tokenFile against the kubeconfig's directory, and an exec command
  // only when it names a path (a bare name is looked up in PATH).
  const abs = (p: unknown, always: boolean): unknown =>
    typeof p === "string" && p !== "" && !p.startsWith("/") && (always || p.includes("/")) ? join(baseDir, p) : p;
  if ("tokenFile" in user) user.tokenFile = abs(user.tokenFile, true);
  for (const f of ["client-certificate", "client-key"]) if (f in user) user[f] = abs(user[f], true);
  if (user.exec && typeof user.exec === "object") {
    const exec = { ...(user.exec as Record<string, unknown>) };
    exec.command = abs(exec.command, false);
    user.exec = exec;
  }
  return user;
}
