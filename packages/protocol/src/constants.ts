/** Names and limits that konnectivity peers match on. Changing any of them breaks interop. */

/** Full gRPC method path of the client front door (no protobuf package). */
export const PROXY_METHOD = "/ProxyService/Proxy";
/** Full gRPC method path agents call to open their long-lived tunnel. */
export const AGENT_CONNECT_METHOD = "/AgentService/Connect";

/** gRPC metadata keys (lower case, as on the wire). */
export const Metadata = {
  agentID: "agentid",
  agentIdentifiers: "agentidentifiers",
  authorization: "authorization",
  serverID: "serverid",
  serverCount: "servercount",
} as const;

/**
 * Largest DATA payload we put in one packet. Well under the 4 MiB Go peers accept in one gRPC
 * message (grpc-go's default max receive size), big enough that per-message costs do not dominate
 * (32-64 KiB measured best).
 */
export const MAX_DATA_CHUNK = 64 * 1024;

/** Error texts peers (and users' scripts) match on. */
export const DialErrors = {
  noAgent: "No agent available",
  unknownConnectID: "Unknown connectID",
  unrecognizedConnectID: "unrecognized connectID",
  backendDialTimeout: "timed out waiting for backend dial",
  /**
   * Our proxy-server's answer to a dial that arrives while it drains (SIGTERM): nothing was sent
   * to any agent, so a client may dial again on a new connection (another replica). Go clients
   * read it as any DIAL_RSP error.
   */
  serverDraining: "proxy server is draining: dial again on a new connection",
} as const;
