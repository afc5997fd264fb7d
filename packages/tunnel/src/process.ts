/**
 * `@cluster-proxy/tunnel/process`: what a long-running component serves about its process (the
 * health and admin ports' handlers, process statistics). Apart from the package's main entry so
 * that the client SDK, which loads that entry, does not load `node:v8`, `node:vm` and
 * `node:perf_hooks` into every program that dials through the hub.
 */
export * from "./admin-http.js";
export * from "./process-stats.js";
