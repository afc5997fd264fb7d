/**
 * @cluster-proxy/tunnel: the engine shared by server, agent and client: gRPC framing on
 * node:http2, the connection engine (table, flow control, fair turns), packet I/O, the error
 * catalog's tunnel errors, certificate reloading and packet counters. The logger interface, the
 * clock and the backoffs are `@cluster-proxy/kit`'s; the health/admin endpoints and process
 * statistics are `@cluster-proxy/kit/process`.
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
