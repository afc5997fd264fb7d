/**
 * @cluster-proxy/client: reach `host:port` inside a managed cluster through the cluster-proxy hub, over
 * its gRPC front door (wire-compatible with Go's konnectivity-client) or its HTTP CONNECT door.
 * Guide: docs/guides/sdk.md#api
 */
export { dial, TunnelClient } from "./tunnel-client.js";
export { TunnelSocket, CLOSE_RESPONSE_TIMEOUT_MS } from "./tunnel-socket.js";
export { dialConnect, HttpConnectError, type ConnectProxyOptions, type DialConnectOptions } from "./connect-dial.js";
export {
  createTunnelAgent,
  createTunnelHttpsAgent,
  TunnelHttpAgent,
  TunnelHttpsAgent,
  type TunnelAgentOptions,
  type TunnelHttpsAgentOptions,
  type TunnelDialerOptions,
} from "./tunnel-agent.js";
export {
  DEFAULT_DIAL_TIMEOUT_MS,
  DEFAULT_TCP_KEEPALIVE_MS,
  loadProxyTls,
  type DialOptions,
  type ProxyOptions,
  type ProxyTls,
  type ProxyTlsFiles,
  type TunnelClientOptions,
} from "./options.js";
export { ClusterProxyError, ConfigError, ErrorCodes, type ErrorCode } from "@cluster-proxy/errors";
export {
  TlsSessionCache,
  sharedTlsSessions,
  ConnectError,
  DialError,
  ProtocolError,
  TlsFileError,
  TunnelClosedError,
  type ClientDialFailureReason,
} from "@cluster-proxy/tunnel";
export { silentLogger, type Logger } from "@cluster-proxy/kit";
