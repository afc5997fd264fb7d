/**
 * @cluster-proxy/agent: the konnectivity-compatible proxy-agent. Promises {@link ProxyAgent} (what
 * `cluster-proxy agent` and `up` run), its metrics registry (for the generated metrics reference)
 * and the error a refused destination raises; everything else stays inside the package.
 */
export { ProxyAgent } from "./agent.js";
export { DestinationRefusedError } from "./destination/destination-policy.js";
export { AgentMetrics } from "./metrics.js";
