/**
 * @cluster-proxy/client: reach `host:port` inside a managed cluster through the cluster-proxy
 * hub, over its gRPC front door (konnectivity protocol, wire-compatible with Go's
 * konnectivity-client) or its HTTP CONNECT door. No Kubernetes client needed.
 *
 * Dial in five lines:
 * ```ts
 * import { dial, loadProxyTls } from "@cluster-proxy/client";
 * const tls = loadProxyTls({ caFile: "ca.crt", certFile: "client.crt", keyFile: "client.key" });
 * const socket = await dial("east:443", { proxy: { host: "hub.example", port: 8090, ...tls } });
 * socket.write("hello");
 * socket.on("data", (chunk) => console.log(chunk.toString()));
 * ```
 *
 * - {@link dial}: one single-use tunnel (new HTTP/2 session per connection, like Go's
 *   `CreateSingleUseGrpcTunnel`). {@link TunnelClient}: one session, many dials.
 * - {@link TunnelSocket}: the `net.Socket`-like Duplex you get (see its notes on `end()`).
 * - {@link dialConnect}: the same through HTTP CONNECT; returns the raw socket.
 * - {@link createTunnelAgent} / {@link createTunnelHttpsAgent}: `http.Agent`/`https.Agent` for
 *   Node HTTP clients, e.g. `https://east` reaches cluster `east`'s kube-apiserver.
 * - Failures are `DialError` (`reason`: `endpoint`, `timeout`, `context`, `dialclosed`,
 *   `tunnelclosed`, `unknown`), `HttpConnectError` (CONNECT status and body),
 *   `TunnelClosedError` (an open tunnel died), `ConnectError` (hub unreachable), `ProtocolError`
 *   and `ConfigError` (bad options or unreadable files). Every one is a `ClusterProxyError` with
 *   a stable `code` from `ErrorCodes` (docs/reference/errors.md) and keeps its `cause`.
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
  TunnelClosedError,
  type ClientDialFailureReason,
} from "@cluster-proxy/tunnel";
export { silentLogger, type Logger } from "@cluster-proxy/kit";
