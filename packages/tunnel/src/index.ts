/**
 * @cluster-proxy/tunnel: the engine shared by server, agent and client: gRPC framing on
 * node:http2, the connection engine (table, flow control, fair turns), packet I/O, the error
 * catalog's tunnel errors, certificate reloading and packet counters. The logger interface, the
 * clock and the backoffs are `@cluster-proxy/kit`'s; the health/admin endpoints and process
 * statistics are `@cluster-proxy/kit/process`.
 */
export {
  ClientCall,
  ConnectError,
  connectSession,
  type ConnectTarget,
  FRAME_HEADER,
  frameMessage,
  grpcCodeName,
  GrpcStatus,
  type HttpProxy,
  IDLE_PROBE_MAX_MS,
  IDLE_PROBE_MS,
  keepSessionAlive,
  openCall,
  probeIdleSession,
  ProxyConnectError,
  proxyFromEnvironment,
  sealFrame,
  serveGrpc,
  ServerCall,
  type StreamStatus,
  TUNNEL_HTTP2_OPTIONS,
  unreachedFailure,
  widenSessionWindow,
} from "./grpc/index.js";
export {
  ConnectionFlow,
  ConnectionTable,
  FlowState,
  SEND_QUANTUM,
  SharedStream,
  TurnScheduler,
} from "./engine/index.js";
export { DialError, ProtocolError, TunnelClosedError } from "./errors.js";
/** @public the SDK (`@cluster-proxy/client`) re-exports it: the type of `DialError.reason`. */
export type { ClientDialFailureReason } from "./errors.js";
export { sendData, sendPacket } from "./packet-io.js";
export { PacketCounts } from "./packet-counts.js";
export { certificateInfo, CertReloader, earliestExpiry, type ReloadResult, tlsDigest } from "./cert-reloader.js";
export {
  checkTlsMaterial,
  type FlagFile,
  loadCaFile,
  loadTlsFiles,
  loadTlsFilesSync,
  pemProblem,
  TlsFileError,
  type TlsFiles,
  type TlsMaterial,
} from "./tls-files.js";
export {
  AGENT_TLS_FLAGS,
  describeConnectFailure,
  NOT_SIGNED_BY_CA,
  NOT_TLS,
  SDK_TLS_OPTIONS,
  serverIsShedding,
  withoutOpensslInternals,
} from "./tls-diagnosis.js";
export { connectResuming, sharedTlsSessions, TlsSessionCache, tlsSessionKey } from "./tls-sessions.js";
export { sharedSecureContexts, SecureContextCache } from "./secure-contexts.js";
