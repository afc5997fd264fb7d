/**
 * Names of hub objects that more than one component writes or reads: the addon manager creates
 * them, the gateway and the CLI's hub operations find them by these names (docs/design/gateway.md,
 * "Names shared by the parts"). One declaration each, so a rename cannot reach only one side.
 */

/**
 * The addon's name: the ManagedClusterAddOn in each cluster namespace, the ClusterManagementAddOn
 * and the default ManagedProxyConfiguration (the Go addon's name too). The addon manager creates
 * and signs for it; the gateway's fleet view and the CLI's `health` read it.
 */
export const ADDON_NAME = "cluster-proxy";
/**
 * OCM's label naming the addon on its CertificateSigningRequests and ManifestWorks, value
 * {@link ADDON_NAME}: the addon manager checks and sets it, the CLI's `health` selects by it.
 */
export const ADDON_NAME_LABEL = "open-cluster-management.io/addon-name";

/**
 * The Secret in the proxy-server namespace publishing the proxy-servers' serving CA bundle
 * (`ca.crt`) and the agent CA bundle ({@link SERVER_CA_AGENT_CA_KEY}) to hub clients (the Go
 * addon's name). The addon manager writes it; the CLI's hub operations read it.
 */
export const SERVER_CA_SECRET = "proxy-server-ca";
/** The key of the agent CA bundle in {@link SERVER_CA_SECRET} (the CLI's gateway-endpoint probe verifies agents with it). */
export const SERVER_CA_AGENT_CA_KEY = "agent-ca.crt";

/** The label the proxy-servers' pods and Services carry (the Go addon's), value {@link PROXY_SERVER_COMPONENT}. */
export const COMPONENT_LABEL = "proxy.open-cluster-management.io/component-name";
/** The {@link COMPONENT_LABEL} value of the proxy-servers: the addon manager sets it, the CLI selects by it. */
export const PROXY_SERVER_COMPONENT = "proxy-server";

/**
 * The proxy-servers' door ports as the addon manager renders them (the server's defaults): the CLI
 * reaches the doors by them.
 */
/** The gRPC client door (`--server-port`). */
export const GRPC_DOOR_PORT = 8090;
/** The agent door (`--agent-port`): agents' tunnels. */
export const AGENT_DOOR_PORT = 8091;
/** The health door (`--health-port`): `/healthz`, `/readyz`, `/metrics`. */
export const HEALTH_DOOR_PORT = 8092;
/** The HTTP CONNECT door (`--http-connect-port`), opened on every proxy-server the addon manager renders. */
export const CONNECT_DOOR_PORT = 8093;

/**
 * The gateway's Deployment and Service (chart), and the host of its serving certificate: the addon
 * manager issues the certificate and writes ClusterProfiles naming it, the CLI's `kubeconfig` and
 * `relay` reach it.
 */
export const GATEWAY_SERVICE = "cluster-proxy-addon-user";
/** The gateway's port on its Service and container (same two sides as {@link GATEWAY_SERVICE}). */
export const GATEWAY_PORT = 9092;
/** Serving certificate of the gateway (`tls.crt`, `tls.key`, `ca.crt` = serving CA bundle): the addon manager writes it, the CLI reads `ca.crt`. */
export const GATEWAY_SERVING_SECRET = "cluster-proxy-gateway-serving";
/** The gateway's identity towards the agents (`tls.crt`, `tls.key`, `ca.crt` = gateway CA bundle, `agent-ca.crt`): the addon manager writes it, the chart mounts it into the gateway. */
export const GATEWAY_IDENTITY_SECRET = "cluster-proxy-gateway-identity";
/** Common name of the gateway identity certificate (issued by the addon manager, presented by the gateway to the agents). */
export const GATEWAY_IDENTITY_CN = "open-cluster-management:cluster-proxy:gateway";
/** The key of the identity Secret holding the agent CA bundle the gateway checks agents' endpoints with. */
export const GATEWAY_AGENT_CA_KEY = "agent-ca.crt";
/** Suffix of the gateway CA's Secret name: `<signer>-gateway`. */
export const GATEWAY_CA_SUFFIX = "-gateway";

/** The DNS names of the gateway's Service in namespace `ns`, shortest first. */
export function gatewayServiceNames(ns: string): string[] {
  const s = GATEWAY_SERVICE;
  return [s, `${s}.${ns}`, `${s}.${ns}.svc`, `${s}.${ns}.svc.cluster.local`];
}
