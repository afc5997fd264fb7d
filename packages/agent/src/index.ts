/**
 * @cluster-proxy/agent: the konnectivity-compatible proxy-agent (multi-server connector,
 * endpoint dialer, drain, health and metrics ports).
 */
export {
  ProxyAgent,
  parseServerHandshake,
  type AgentStarted,
  type ProxyAgentDeps,
  type ServerHandshake,
} from "./agent.js";
export {
  validateAgentOptions,
  resolveAgentID,
  agentIdentifiersHeader,
  loadAgentTls,
  readAuthorization,
  loadDestinationPolicy,
  localInterfaceAddresses,
  type AgentTlsMaterial,
} from "./agent-config.js";
export {
  DestinationPolicy,
  DestinationRefusedError,
  DESTINATION_POLICY_REFUSAL,
  DESTINATION_REFUSED_CODE,
  parseAllowEntry,
  METADATA_CIDRS,
  THIS_HOST_CIDRS,
  type Destination,
  type DestinationPolicySpec,
  type DestinationRuleSpec,
  type PolicyVerdict,
} from "./destination-policy.js";
export { canonicalAddress, type CanonicalAddress } from "./destination-address.js";
export { guardedConnector, refusalMessage, type Resolver } from "./destination-guard.js";
export {
  resolveEndpointAddress,
  dialEndpoint,
  defaultConnector,
  goDialErrorText,
  type EndpointAddressing,
  type DialFailure,
  type SocketConnector,
} from "./endpoint-dialer.js";
export { AgentMetrics, type AgentSegment, type DialLimitFlag, type EndpointDialFailureReason } from "./metrics.js";
export {
  ServerTunnel,
  allocateConnectID,
  dialLimitError,
  type DialLimits,
  ENDPOINT_WRITE_BUDGET,
  STREAM_SEND_BUDGET,
  CLOSE_LINGER_MS,
  type ServerTunnelDeps,
  type ServerTunnelEvents,
} from "./server-tunnel.js";
