/**
 * @cluster-proxy/tunnel: the engine shared by server, agent and client: gRPC framing on
 * node:http2, the connection engine (table, flow control, fair turns), packet I/O, backoff, the
 * error catalog, the logger interface, process statistics, packet counters and the health/admin
 * port handlers.
 */
export * from "./grpc/index.js";
export * from "./engine/index.js";
export * from "./logger.js";
export * from "./backoff.js";
export * from "./errors.js";
export * from "./packet-io.js";
export * from "./packet-counts.js";
export * from "./cert-reloader.js";
export * from "./tls-diagnosis.js";
export * from "./pem-check.js";
