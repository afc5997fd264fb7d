/**
 * @cluster-proxy/protocol: the konnectivity wire protocol, with no I/O.
 */
export {
  decodePacket,
  type DialRequest,
  encodeData,
  encodePacket,
  type Packet,
  PacketDecodeError,
  type PacketRoute,
  PacketType,
  packetTypeName,
  peekDecoded,
  peekPacket,
} from "./packet.js";
export { AGENT_CONNECT_METHOD, DialErrors, MAX_DATA_CHUNK, Metadata, PROXY_METHOD } from "./constants.js";
export {
  type AgentIdentifiers,
  IdentifiersError,
  parseAgentIdentifiers,
  validateAgentIdentifiers,
} from "./identifiers.js";
export { destHostKey, joinHostPort, parseHostPort } from "./address.js";
export {
  decodeFlowControl,
  encodeFlowControl,
  FLOW_CONTROL_METADATA,
  FlowControl,
  isFlowControlType,
} from "./flow-control.js";
