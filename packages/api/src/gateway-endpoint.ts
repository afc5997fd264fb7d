/**
 * The gateway -> agent endpoint contract (docs/design/gateway.md): the reserved dial address, the
 * headers the gateway sets for the agent and the answers both read. The gateway
 * (`packages/gateway`) writes it, the agent (`packages/agent`) reads it, the CLI's health probe
 * dials it: all three import it from here, so the two sides of the trust boundary cannot drift.
 */

/**
 * The reserved host of every agent's gateway endpoint. The gateway dials
 * `<host>.<cluster>:<port>` through the tunnel and uses it as TLS servername and HTTP authority;
 * the agent serves dials to it in-process (any port) and never resolves it.
 */
export const GATEWAY_ENDPOINT_HOST = "gateway.cluster-proxy.invalid";
/** The port the gateway and the CLI's probe dial the endpoint on (the agent accepts any). */
export const GATEWAY_ENDPOINT_PORT = 443;

/** The tunnel address of `cluster`'s gateway endpoint (gateway and CLI dial it). */
export function gatewayEndpointAddress(cluster: string): string {
  return `${GATEWAY_ENDPOINT_HOST}.${cluster}:${GATEWAY_ENDPOINT_PORT}`;
}

/**
 * The prefix of every contract header. The gateway drops a caller's `Cluster-Proxy-*` headers
 * before it sets its own; the agent never forwards one upstream.
 */
export const CONTRACT_HEADER_PREFIX = "cluster-proxy-";
/** Names the target: one of {@link GATEWAY_TARGETS}. Set by the gateway, required by the agent. */
export const TARGET_HEADER = "cluster-proxy-target";
/** The Service URL of a `service` target: `<http|https>://<name>.<namespace>.svc:<port>`. */
export const SERVICE_HEADER = "cluster-proxy-service";
/** `true`: forward the caller's Authorization unchanged, no impersonation (a `kube` target only). */
export const PASSTHROUGH_HEADER = "cluster-proxy-passthrough";
/** The value of {@link PASSTHROUGH_HEADER} that asks for pass-through. */
export const PASSTHROUGH_VALUE = "true";
/** The caller's IP address as the gateway saw it (an IP literal); a Service gets it as `X-Forwarded-For`. */
export const FORWARDED_FOR_HEADER = "cluster-proxy-forwarded-for";
/** `https` or `http`, how the caller reached the gateway; a Service gets it as `X-Forwarded-Proto`. */
export const FORWARDED_PROTO_HEADER = "cluster-proxy-forwarded-proto";

/**
 * The identity of a `kube` target (Kubernetes' impersonation headers, lowercase): the
 * gateway sets them from the hub identity, each name and group with its impersonation prefix; the
 * agent forwards them only when they carry it, with its own token. The gateway drops a caller's
 * `Impersonate-*` headers first (it honours them only through the hub's `impersonate` grant).
 */
export const IMPERSONATE_HEADER_PREFIX = "impersonate-";
/** The user; exactly one, never empty. */
export const IMPERSONATE_USER_HEADER = "impersonate-user";
/** The groups (repeated). */
export const IMPERSONATE_GROUP_HEADER = "impersonate-group";
/** The user's UID, at most one. */
export const IMPERSONATE_UID_HEADER = "impersonate-uid";
/** `Impersonate-Extra-<key>`: the extra fields, the key percent-encoded as the kube-apiserver decodes it. */
export const IMPERSONATE_EXTRA_PREFIX = "impersonate-extra-";

/** The values of {@link TARGET_HEADER}: the cluster's kube-apiserver, or a Service in the cluster. */
export const GATEWAY_TARGETS = { kube: "kube", service: "service" } as const;

/**
 * The groups an impersonation may carry without the gateway's prefix: those the kube-apiserver
 * gives every authenticated user anyway. The agent refuses every other unprefixed group or user.
 */
export const UNPREFIXED_GROUPS: readonly string[] = ["system:authenticated"];

/**
 * The agent's DIAL_RSP error for a dial to the reserved host when its endpoint is disabled; the
 * gateway relays it in its 502 and the CLI's health probe reports it.
 */
export const GATEWAY_ENDPOINT_DISABLED = "gateway endpoint not enabled on this agent (--gateway-ca-file unset)";
