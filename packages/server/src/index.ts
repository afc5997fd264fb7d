/**
 * @cluster-proxy/server: the proxy-server (agent service, gRPC and HTTP CONNECT front doors,
 * routing strategies, health and metrics). Exported: what the CLI, the tests and the generated
 * docs use from outside the package; everything else stays inside it.
 */
export { ProxyServer, type ProxyServerDeps, type ServerAddresses } from "./proxy-server.js";
export { MAX_TALLIED_IDENTIFIERS, type IdentifierTraffic } from "./routing/cluster-traffic.js";
export type { DialProbeResult } from "./front-doors/probe-dial.js";
export { AgentAuthError, type TokenReviewFn } from "./agents/token-review.js";
export { IDLE_METRICS_SOURCE, ServerMetrics } from "./metrics.js";
/** The TLS handshake overload behaviour (tests check what a shed client sees and what is logged). */
export { HandshakeFailureLog } from "./listeners/handshake-failures.js";
export { SHED_ALERT, SLOT_MS } from "./listeners/handshake-pacer.js";
