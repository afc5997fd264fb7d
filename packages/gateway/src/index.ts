/**
 * @cluster-proxy/gateway: hub users reach managed clusters as themselves. The {@link Gateway}
 * authenticates a caller against the hub (TokenReview, OIDC, client certificates), asks the hub
 * whether it may reach the cluster (SubjectAccessReview on managedclusters/proxy), and relays the
 * request through the tunnel to the cluster's gateway endpoint with the caller's identity to
 * impersonate (docs/design/gateway.md). Every request leaves an audit record.
 *
 * Promises the {@link Gateway} and its hub client (what `cluster-proxy gateway` runs), its metrics
 * registry (for the generated metrics reference), the cluster pool and audit record the
 * integration tests drive; everything else stays inside the package.
 */
export { Gateway, SHUTDOWN_GRACE_MS } from "./gateway.js";
export { kubeHubApi } from "./kube-hub.js";
export { ClusterPool } from "./cluster-pool.js";
export type { AuditRecord } from "./audit-log.js";
export { GatewayMetrics } from "./metrics.js";
