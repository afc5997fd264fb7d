/**
 * `@cluster-proxy/kit/process`: what a long-running component serves about its process: the health
 * and admin ports' endpoints (on the endpoint server of `@cluster-proxy/kit/endpoints`) and the
 * process statistics of `/debug/process`. Apart from the main entry so that the client SDK, which
 * loads that entry, does not load `node:v8`, `node:vm` and `node:perf_hooks` into every program
 * that dials through the hub.
 */
export { adminPortEndpoints, healthPortEndpoints } from "./admin-http.js";
export { countOpenFds, type ProcessStats } from "./process-stats.js";
