/**
 * The client-go exec credential protocol (`client.authentication.k8s.io`, KEP-541 and KEP-5339) as
 * `cluster-proxy credential` speaks it: read `KUBERNETES_EXEC_INFO` (the API version the client
 * wants, and the cluster it is for: `spec.cluster.config` is the `client.authentication.k8s.io/exec`
 * extension of the kubeconfig cluster, or of a ClusterProfile's access provider), and answer with
 * an ExecCredential carrying a bearer token and when it expires.
 */
import { ConfigError } from "@cluster-proxy/api";
import { errorMessage } from "@cluster-proxy/errors";

/** The versions of the protocol the plugin answers in. */
export const EXEC_API_VERSIONS = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"] as const;
export type ExecApiVersion = (typeof EXEC_API_VERSIONS)[number];

/** What the client told the plugin. */
export interface ExecInfo {
  apiVersion: ExecApiVersion;
  /** The managed cluster named by the access provider's exec extension (`{"cluster": "<name>"}`), when given. */
  cluster?: string;
  interactive: boolean;
}

/** An ExecCredential answer. */
export interface ExecCredential {
  apiVersion: ExecApiVersion;
  kind: "ExecCredential";
  status: { token: string; expirationTimestamp?: string };
}

/**
 * Parse `KUBERNETES_EXEC_INFO` (absent: v1, no cluster, as when run by hand). A cluster extension
 * that is present must be an object with a string `cluster`.
 */
export function parseExecInfo(raw: string | undefined): ExecInfo {
  if (raw === undefined || raw.trim() === "") return { apiVersion: EXEC_API_VERSIONS[0], interactive: false };
  let info: unknown;
  try {
    info = JSON.parse(raw);
  } catch (err) {
    throw new ConfigError(`KUBERNETES_EXEC_INFO is not JSON: ${errorMessage(err)}`, { cause: err });
  }
  const obj = isRecord(info) ? info : {};
  const apiVersion = EXEC_API_VERSIONS.find((v) => v === obj.apiVersion);
  if (!apiVersion)
    throw new ConfigError(
      `KUBERNETES_EXEC_INFO: apiVersion ${JSON.stringify(obj.apiVersion)} is not one of ${EXEC_API_VERSIONS.join(", ")}`,
    );
  const spec = isRecord(obj.spec) ? obj.spec : {};
  const cluster = isRecord(spec.cluster) ? spec.cluster : {};
  const result: ExecInfo = { apiVersion, interactive: spec.interactive === true };
  if (cluster.config !== undefined && cluster.config !== null) {
    const config = cluster.config;
    if (!isRecord(config) || typeof config.cluster !== "string" || config.cluster === "")
      throw new ConfigError(
        `KUBERNETES_EXEC_INFO: spec.cluster.config ${JSON.stringify(config)} is not {"cluster": "<managed cluster>"} (the client.authentication.k8s.io/exec extension of the cluster-proxy access provider)`,
      );
    result.cluster = config.cluster;
  }
  return result;
}

/** The ExecCredential for `token` (with its expiry, when known). */
export function execCredential(apiVersion: ExecApiVersion, token: string, expires?: Date): ExecCredential {
  return {
    apiVersion,
    kind: "ExecCredential",
    status: { token, ...(expires ? { expirationTimestamp: expires.toISOString().replace(/\.\d{3}Z$/, "Z") } : {}) },
  };
}

/** The payload of a JWT (undefined for anything that is not one). Nothing is verified: the hub does that. */
export function jwtClaims(token: string): Record<string, unknown> | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || !parts[1]) return undefined;
  try {
    const claims: unknown = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
    return isRecord(claims) ? claims : undefined;
  } catch {
    return undefined;
  }
}

/** When a JWT expires (`exp`), or undefined when the token says nothing about it. */
export function jwtExpiry(token: string): Date | undefined {
  const exp = jwtClaims(token)?.exp;
  return typeof exp === "number" && Number.isFinite(exp) ? new Date(exp * 1000) : undefined;
}

/** `<namespace>/<name>` of the ServiceAccount a Kubernetes ServiceAccount token was issued to. */
export function tokenServiceAccount(token: string): { namespace: string; name: string } | undefined {
  const sub = jwtClaims(token)?.sub;
  const m = typeof sub === "string" ? /^system:serviceaccount:([^:]+):([^:]+)$/.exec(sub) : null;
  return m ? { namespace: m[1]!, name: m[2]! } : undefined;
}

/** Parse `<namespace>/<name>`. */
export function parseServiceAccount(flag: string, value: string): { namespace: string; name: string } {
  const m = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(value);
  if (!m) throw new ConfigError(`${flag}: "${value}" is not <namespace>/<name> of a ServiceAccount`);
  return { namespace: m[1]!, name: m[3]! };
}

/** The body of a TokenRequest (`authentication.k8s.io/v1`); no audiences would mean the apiserver's own. */
export function tokenRequest(expirationSeconds: number, audiences: readonly string[]): Record<string, unknown> {
  return {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds, ...(audiences.length > 0 ? { audiences: [...audiences] } : {}) },
  };
}

/** The token and expiry of a TokenRequest's answer, or undefined when it carries no token. */
export function tokenRequestStatus(answer: unknown): { token: string; expires?: Date } | undefined {
  const status = isRecord(answer) && isRecord(answer.status) ? answer.status : {};
  if (typeof status.token !== "string" || status.token === "") return undefined;
  const at = typeof status.expirationTimestamp === "string" ? new Date(status.expirationTimestamp) : undefined;
  return { token: status.token, ...(at && !Number.isNaN(at.getTime()) ? { expires: at } : {}) };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
