/**
 * @cluster-proxy/agent: the konnectivity-compatible proxy-agent. Promises {@link ProxyAgent} (what
 * `cluster-proxy agent` and `up` run), the validation of its options ({@link validateAgentOptions}:
 * the schema's plus the destination rules), its metrics registry (for the generated metrics reference)
 * and the error a refused destination raises; everything else stays inside the package.
 */
export { ProxyAgent } from "./agent.js";
export { validateAgentOptions } from "./agent-config.js";
export { DestinationRefusedError } from "./destination/destination-policy.js";
export { AgentMetrics } from "./metrics.js";
