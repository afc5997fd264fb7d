/**
 * @cluster-proxy/tunnel: the engine shared by server, agent and client: gRPC framing on
 * node:http2, the connection engine (table, flow control, fair turns), packet I/O, the error
 * catalog, certificate reloading and packet counters. The logger interface and the backoffs are
 * `@cluster-proxy/kit`'s; the health/admin handlers and process statistics are
 * `@cluster-proxy/tunnel/process`.
 */
export * from "./grpc/index.js";
export * from "./engine/index.js";
export * from "./errors.js";
export * from "./packet-io.js";
export * from "./packet-counts.js";
export * from "./cert-reloader.js";
export * from "./tls-diagnosis.js";
export * from "./pem-check.js";
export * from "./tls-sessions.js";
