/**
 * The one error type of a refused or failed gateway request: the HTTP status the caller gets, a
 * one-line message, and the reason the audit record and the metrics carry.
 */
import { errorMessage } from "@cluster-proxy/errors";

/** Why a request ended without reaching its target (audit `reason`, metric labels). */
export type RefusalReason =
  | "bad-request"
  | "method-not-allowed"
  | "unauthenticated"
  | "authentication-unavailable"
  | "forbidden"
  | "impersonation-forbidden"
  | "service-not-exposed"
  | "origin-forbidden"
  | "unknown-cluster"
  | "authorization-unavailable"
  | "no-tunnel"
  | "dial-timeout"
  | "endpoint-error"
  | "shutting-down"
  | "too-many-requests"
  | "caller-gone";

/**
 * A request the gateway answers itself, with `status` and a one-line `message` (and, for a 429, the
 * seconds of its `Retry-After`).
 */
export class GatewayError extends Error {
  constructor(
    readonly status: number,
    readonly reason: RefusalReason,
    message: string,
    options?: ErrorOptions,
    readonly retryAfterSeconds?: number,
  ) {
    super(message.replace(/[\r\n]+/g, " "), options);
    this.name = "GatewayError";
  }

  /** Whether the caller was refused (4xx: audit decision `deny`) rather than failed (5xx: `error`). */
  get decision(): "deny" | "error" {
    return this.status < 500 ? "deny" : "error";
  }
}

/** `err` as a {@link GatewayError}: itself, or a 500 for anything unexpected. */
export function asGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  const message = errorMessage(err);
  return new GatewayError(500, "endpoint-error", `internal error: ${message}`, { cause: err });
}
