/**
 * Rejected TLS handshakes in the server's log (issue 18, point 4): each with the reason a user can
 * act on (unknown CA, expired, wrong key usage, no certificate, not TLS at all), rate-limited so
 * a misconfigured fleet cannot flood the log.
 */
import type * as tls from "node:tls";
import { NOT_SIGNED_BY_CA, NOT_TLS, withoutOpensslInternals } from "@cluster-proxy/tunnel";
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";

/** Which port refused, and the flags that configure its certificates. */
export interface PortTls {
  /** The port's flag, e.g. `--agent-port`. */
  port: string;
  /** The CA client certificates must chain to, e.g. `--cluster-ca-cert`. */
  clientCa: string;
  /** The port's own certificate, e.g. `--cluster-cert`. */
  cert: string;
  /** A front door (clients), not the agent port. */
  front: boolean;
}

/**
 * Why a handshake on `port` failed, or undefined when the client only went away (closed or reset
 * the connection without a TLS complaint: a timeout or abort on its side, not worth a warning).
 * `socket.authorizationError` carries node's verdict on the client certificate (node checks it
 * after OpenSSL's handshake and resets the connection, so `err` itself is a plain reset then).
 */
export function explainRejectedHandshake(
  err: Error,
  socket: tls.TLSSocket | undefined,
  port: PortTls,
): string | undefined {
  const verdict = socket?.authorizationError;
  const code = (typeof verdict === "string" ? verdict : verdict?.message) ?? (err as NodeJS.ErrnoException).code ?? "";
  if (NOT_SIGNED_BY_CA.has(code)) {
    const hint = port.front
      ? `; an agent certificate (signed by --cluster-ca-cert) at a client front door fails like this: agents connect to --agent-port`
      : "";
    return `client certificate not signed by ${port.clientCa} (unknown CA, ${code})${hint}`;
  }
  if (code === "CERT_HAS_EXPIRED") return `client certificate expired (${code})`;
  if (code === "CERT_NOT_YET_VALID") return `client certificate not valid yet (${code}; check the clocks)`;
  if (code === "INVALID_PURPOSE") {
    return `client certificate is not for TLS client authentication (wrong key usage / extended key usage, ${code})`;
  }
  if (code === "ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE") {
    return `the client sent no certificate (this port requires one signed by ${port.clientCa})`;
  }
  if (code === "ERR_SSL_TLSV1_ALERT_UNKNOWN_CA" || code === "ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE") {
    return `the client does not trust ${port.cert} (TLS alert from the client: ${code}); its CA must be the one that signed ${port.cert}`;
  }
  if (code === "ERR_SSL_SSLV3_ALERT_CERTIFICATE_UNKNOWN" || code === "ERR_SSL_SSLV3_ALERT_CERTIFICATE_EXPIRED") {
    return `the client refused ${port.cert} (${code})`;
  }
  if (NOT_TLS.has(code)) return `the client does not speak TLS (${code}): wrong port or protocol`;
  if (code === "ERR_SSL_NO_APPLICATION_PROTOCOL")
    return `the client offered no ALPN protocol this port serves (${code})`;
  if (code === "ECONNRESET" || code === "EPIPE" || code === "ERR_SSL_PROTOCOL_ERROR" || code === "") return undefined;
  return `${code}: ${withoutOpensslInternals(err.message)}`;
}

/**
 * Logs rejected handshakes as warnings, at most `burst` per `intervalMs`; what is held back is
 * counted and reported with the next warning; the windows are on `clock` (default the kit's
 * `realClock`).
 */
export class HandshakeFailureLog {
  private windowStart = 0;
  private inWindow = 0;
  private suppressed = 0;

  constructor(
    private readonly log: Logger,
    private readonly burst = 10,
    private readonly intervalMs = 10_000,
    private readonly clock: Clock = realClock,
  ) {}

  /** Record one failed handshake on `port`; logs when it names a reason and the budget allows. */
  failed(err: Error, socket: tls.TLSSocket | undefined, port: PortTls): void {
    const reason = explainRejectedHandshake(err, socket, port);
    if (reason === undefined) {
      this.log.debug({ port: port.port, err: err.message }, "TLS handshake abandoned by the client");
      return;
    }
    const t = this.clock.now();
    if (t - this.windowStart >= this.intervalMs) {
      this.windowStart = t;
      this.inWindow = 0;
    }
    if (this.inWindow >= this.burst) {
      this.suppressed++;
      return;
    }
    this.inWindow++;
    const client = socket?.remoteAddress ? `${socket.remoteAddress}:${socket.remotePort}` : undefined;
    const extra = this.suppressed > 0 ? { suppressedBefore: this.suppressed } : {};
    this.suppressed = 0;
    this.log.warn({ port: port.port, client, ...extra }, `rejected a TLS handshake: ${reason}`);
  }
}
