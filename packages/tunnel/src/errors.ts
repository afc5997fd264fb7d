/**
 * The tunnel's errors. Their codes come from the one error catalog (`@cluster-proxy/errors`);
 * dial failures also carry a reason from a closed set, the client's (named as
 * the konnectivity client's `dial_failure_total` labels).
 */
import { ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";

/**
 * Why a client's dial failed (the reasons of konnectivity client's `dial_failure_total`): the
 * dial timed out, was aborted, the endpoint (hub or agent) refused it, the hub closed it, the
 * tunnel went away, or something else. The server's own dial failure labels are its metrics'.
 */
export type ClientDialFailureReason = "timeout" | "context" | "endpoint" | "dialclosed" | "tunnelclosed" | "unknown";

/** A dial through the tunnel failed; `message` is the peer's error text where there is one. */
export class DialError extends ClusterProxyError<typeof ErrorCodes.dialFailed> {
  constructor(
    message: string,
    readonly reason: ClientDialFailureReason,
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
