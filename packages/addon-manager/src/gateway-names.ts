/**
 * Names of the gateway's hub objects the manager issues and the CLI reads (docs/design/gateway.md,
 * "Names shared by the parts"). The gateway itself lives in its own package; the manager meets it
 * only through these Secrets and the chart.
 */

/** The gateway's Deployment and Service (chart), and the host of its serving certificate. */
export const GATEWAY_SERVICE = "cluster-proxy-addon-user";
/** The gateway's port on its Service and container. */
export const GATEWAY_PORT = 9092;
/** Serving certificate of the gateway (`tls.crt`, `tls.key`, `ca.crt` = serving CA bundle). */
export const GATEWAY_SERVING_SECRET = "cluster-proxy-gateway-serving";
/** The gateway's identity towards the agents (`tls.crt`, `tls.key`, `ca.crt` = gateway CA bundle, `agent-ca.crt`). */
export const GATEWAY_IDENTITY_SECRET = "cluster-proxy-gateway-identity";
/** Common name of the gateway identity certificate. */
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
