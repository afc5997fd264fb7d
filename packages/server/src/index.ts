/**
 * @cluster-proxy/server: the proxy-server (agent service, gRPC and HTTP CONNECT front doors,
 * routing strategies, health and metrics). Promises {@link ProxyServer} (what `cluster-proxy
 * server` and `up` run), its metrics registry (for the generated metrics reference), the agent
 * authentication error, and the TLS handshake overload behaviour the tests check (what a shed
 * client sees and what is logged); everything else stays inside the package.
 */
export { ProxyServer } from "./proxy-server.js";
export type { IdentifierTraffic } from "./routing/cluster-traffic.js";
export type { DialProbeResult } from "./front-doors/probe-dial.js";
export { AgentAuthError } from "./agents/token-review.js";
export { IDLE_METRICS_SOURCE, ServerMetrics } from "./metrics.js";
export { HandshakeFailureLog } from "./listeners/handshake-failures.js";
export { RESUMED_HANDSHAKE_COST, SHED_ALERT, SLOT_MS } from "./listeners/handshake-pacer.js";
