/**
 * @cluster-proxy/gateway: hub users reach managed clusters as themselves. The {@link Gateway}
 * authenticates a caller against the hub (TokenReview, OIDC, client certificates), asks the hub
 * whether it may reach the cluster (SubjectAccessReview on managedclusters/proxy), and relays the
 * request through the tunnel to the cluster's gateway endpoint with the caller's identity to
 * impersonate (docs/design/gateway.md). Every request leaves an audit record.
 */
export {
  Gateway,
  DEFAULT_CALLER_LIMITS,
  FLEET_PROBE_TIMEOUT_MS,
  SERVING_CERT_POLL_MS,
  SHUTDOWN_GRACE_MS,
  type CallerLimits,
  type GatewayDeps,
  type FleetSettings,
} from "./gateway.js";
export {
  FleetSource,
  FLEET_PROBE_CONCURRENCY,
  FLEET_PROBE_INTERVAL_MS,
  auditEntryOf,
  type FleetSourceOptions,
} from "./fleet-source.js";
export { FleetViewers, AUDIT_SUBRESOURCE, REVIEWS_AT_ONCE, type FleetViewersSettings } from "./fleet-viewers.js";
export { probeEndpoint, type EndpointProbe } from "./endpoint-probe.js";
export { ProbeScheduler, type ProbeSchedulerOptions } from "./probe-scheduler.js";
export type { RecordTap } from "./request-record.js";
export { kubeHubApi } from "./kube-hub.js";
export type {
  HubApi,
  AddOnCondition,
  AddOnInfo,
  ListEvent,
  UserInfo,
  ResourceAttributes,
  ManagedClusterInfo,
  TokenReviewResult,
  ConfigMapListener,
} from "./hub-api.js";
export { ClusterPool, ClusterSessions, type Dialer, type EndpointTls } from "./cluster-pool.js";
export { parseRequestTarget, type RequestTarget, type KubeTarget, type ServiceTarget } from "./request-target.js";
export { kubeRequestInfo, type KubeRequestInfo } from "./request-info.js";
export { parseExposedServices, CLUSTER_SET_LABEL, type ExposedService } from "./exposed-services.js";
export type { AuditLine, AuditRecord, AuditSink, AuditStart } from "./audit-log.js";
export { GatewayMetrics, UNKNOWN_CLUSTER } from "./metrics.js";
