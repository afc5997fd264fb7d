/**
 * @cluster-proxy/server: the proxy-server (agent service, gRPC and HTTP CONNECT front doors,
 * routing strategies, health and metrics).
 */
export * from "./proxy-server.js";
export * from "./server-config.js";
export * from "./strategies.js";
export * from "./connect-request.js";
export * from "./metrics.js";
export * from "./relay.js";
export * from "./backend.js";
export * from "./agent-service.js";
export * from "./proxy-service.js";
export * from "./http-connect.js";
export * from "./handshake-failures.js";
export * from "./handshake-pacer.js";
export { AgentAuthError } from "./token-review.js";
export * from "./first-bytes.js";
