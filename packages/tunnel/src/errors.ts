/**
 * The error catalog: every failure the tunnel reports has a stable `code` and, for dial
 * failures, a reason from a closed set that is also a metric label (konnectivity names).
 */

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

export const ErrorCodes = {
  dialFailed: "CP_ERR_DIAL_FAILED",
  tunnelClosed: "CP_ERR_TUNNEL_CLOSED",
  protocol: "CP_ERR_PROTOCOL",
  connect: "CP_ERR_CONNECT",
  config: "CP_ERR_CONFIG",
  timeout: "CP_ERR_TIMEOUT",
} as const;

/** A dial through the tunnel failed; `message` is the peer's error text where there is one. */
export class DialError extends Error {
  readonly code = ErrorCodes.dialFailed;
  constructor(
    message: string,
    readonly reason: DialFailureReason,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "DialError";
  }
}

/** The tunnel carrying a connection went away. */
export class TunnelClosedError extends Error {
  readonly code = ErrorCodes.tunnelClosed;
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "TunnelClosedError";
  }
}

/** A peer broke the protocol (bad packet, unexpected type). */
export class ProtocolError extends Error {
  readonly code = ErrorCodes.protocol;
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ProtocolError";
  }
}
