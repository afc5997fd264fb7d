/**
 * @cluster-proxy/kit: the machinery every long-running component shares, below the data plane and
 * the control plane alike (the addon manager may not import the tunnel): the logger interface and
 * the backoffs.
 */
export * from "./logger.js";
export * from "./backoff.js";
