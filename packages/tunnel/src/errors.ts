/**
 * The tunnel's errors. Their codes come from the one error catalog (`@cluster-proxy/errors`,
 * re-exported here); dial failures also carry a reason from a closed set that is a metric label
 * (konnectivity names).
 */
import { ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";

export { ClusterProxyError, ErrorCodes, isClusterProxyError, type ErrorCode } from "@cluster-proxy/errors";

/** Why a dial failed. Server-side values match konnectivity's `dial_failure_count` labels. */
export type DialFailureReason =
  | "no_agent"
  | "error_response"
  | "unrecognized_response"
  | "send_rsp"
  | "backend_close"
  | "backend_dial_timeout"
  | "frontend_close"
  | "agent_gone"
  // client-side reasons (konnectivity client `dial_failure_total`)
  | "timeout"
  | "context"
  | "endpoint"
  | "dialclosed"
  | "tunnelclosed"
  | "unknown";

/** A dial through the tunnel failed; `message` is the peer's error text where there is one. */
export class DialError extends ClusterProxyError<typeof ErrorCodes.dialFailed> {
  constructor(
    message: string,
    readonly reason: DialFailureReason,
    options?: ErrorOptions,
  ) {
    super(ErrorCodes.dialFailed, message, options);
    this.name = "DialError";
  }
}

/** The tunnel carrying a connection went away. */
export class TunnelClosedError extends ClusterProxyError<typeof ErrorCodes.tunnelClosed> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.tunnelClosed, message, options);
    this.name = "TunnelClosedError";
  }
}

/** A peer broke the protocol (bad packet, unexpected type). */
export class ProtocolError extends ClusterProxyError<typeof ErrorCodes.protocol> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.protocol, message, options);
    this.name = "ProtocolError";
  }
}
