/**
 * @cluster-proxy/gateway: hub users reach managed clusters as themselves. Promises the Gateway and
 * its hub client, its metrics registry, and the cluster pool and audit record the tests drive.
 * Design: docs/design/gateway.md
 */
export { Gateway, SHUTDOWN_GRACE_MS } from "./gateway.js";
export { kubeHubApi } from "./kube-hub.js";
export { ClusterPool } from "./cluster-pool.js";
export type { AuditRecord } from "./audit-log.js";
export { GatewayMetrics } from "./metrics.js";
