/**
 * @cluster-proxy/gateway: hub users reach managed clusters as themselves. The {@link Gateway}
 * authenticates a caller against the hub (TokenReview, OIDC, client certificates), asks the hub
 * whether it may reach the cluster (SubjectAccessReview on managedclusters/proxy), and relays the
 * request through the tunnel to the cluster's gateway endpoint with the caller's identity to
 * impersonate (docs/design/gateway.md). Every request leaves an audit record.
 */
export { Gateway, SERVING_CERT_POLL_MS, SHUTDOWN_GRACE_MS, type GatewayDeps } from "./gateway.js";
export { kubeHubApi } from "./kube-hub.js";
export type {
  HubApi,
  UserInfo,
  ResourceAttributes,
  ManagedClusterInfo,
  TokenReviewResult,
  ConfigMapListener,
} from "./hub-api.js";
export {
  GATEWAY_ENDPOINT_HOST,
  GATEWAY_ENDPOINT_PORT,
  endpointAddress,
  type Dialer,
  type EndpointTls,
} from "./cluster-pool.js";
export { parseRequestTarget, type RequestTarget, type KubeTarget, type ServiceTarget } from "./request-target.js";
export { kubeRequestInfo, type KubeRequestInfo } from "./request-info.js";
export { parseExposedServices, CLUSTER_SET_LABEL, type ExposedService } from "./exposed-services.js";
export type { AuditRecord, AuditSink } from "./audit-log.js";
export { GatewayMetrics, UNKNOWN_CLUSTER } from "./metrics.js";
