/**
 * @cluster-proxy/kit: the machinery every long-running component shares, below the data plane and
 * the control plane alike (the addon manager may not import the tunnel): the logger interface,
 * the backoffs and the clock. Subpaths: `@cluster-proxy/kit/http` (`node:http` without undici),
 * `@cluster-proxy/kit/endpoints` (the health/metrics/admin endpoint server),
 * `@cluster-proxy/kit/testing` (test-only: the manual clock).
 */
export * from "./logger.js";
export * from "./backoff.js";
export * from "./clock.js";
export * from "./http-headers.js";
export * from "./plain-http-guard.js";
