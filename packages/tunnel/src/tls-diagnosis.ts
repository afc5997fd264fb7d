/**
 * TLS failures in words a user can act on (issue 18, point 4): which certificate or CA is at
 * fault, or that the peer does not speak TLS at all ("wrong port or protocol"), instead of
 * OpenSSL's codes or the `cancelled` / `stream reset` a TLS 1.3 client sees when the server
 * refuses its certificate after the client considered the handshake done.
 */
import { ErrorCodes, errorMessage } from "@cluster-proxy/errors";

/** How the caller names its TLS settings (flags for the agent, option names for the SDK). */
export interface TlsSettingNames {
  /** The CA the server's certificate must chain to, e.g. `--ca-cert` or `proxy.ca`. */
  ca: string;
  /** Our client certificate, e.g. `--agent-cert` or `proxy.cert`. */
  cert: string;
  /** Its key, e.g. `--agent-key` or `proxy.key`. */
  key: string;
  /** The server's setting that checks our certificate, e.g. `--cluster-ca-cert`. */
  serverCa: string;
}

/** The settings of the proxy-agent. */
export const AGENT_TLS_FLAGS: TlsSettingNames = {
  ca: "--ca-cert",
  cert: "--agent-cert",
  key: "--agent-key",
  serverCa: "the server's --cluster-ca-cert",
};

/** The settings of the client SDK's `proxy` option. */
export const SDK_TLS_OPTIONS: TlsSettingNames = {
  ca: "proxy.ca",
  cert: "proxy.cert",
  key: "proxy.key",
  serverCa: "the server's --server-ca-cert",
};

/** The TLS alert code a shedding server answers with (see the server's handshake pacer). */
const SHED_CODE = "ERR_SSL_TLSV1_ALERT_USER_CANCELLED";

/** Verification codes of a peer certificate that does not chain to the trusted CA. */
export const NOT_SIGNED_BY_CA: ReadonlySet<string> = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
]);

/** Codes of a peer that does not speak TLS at all (plaintext, HTTP, another protocol). */
export const NOT_TLS: ReadonlySet<string> = new Set([
  "ERR_SSL_WRONG_VERSION_NUMBER",
  "ERR_SSL_PACKET_LENGTH_TOO_LONG",
  "ERR_SSL_HTTP_REQUEST",
  "ERR_SSL_UNKNOWN_PROTOCOL",
  "ERR_SSL_RECORD_LAYER_FAILURE",
]);

/** The error and its causes, outermost first. */
function chain(err: unknown): Error[] {
  const out: Error[] = [];
  for (let e = err; e instanceof Error && out.length < 8; e = e.cause) out.push(e);
  return out;
}

function codeOf(err: unknown): string | undefined {
  for (const e of chain(err)) {
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === "string" && code !== ErrorCodes.connect) return code;
  }
  return undefined;
}

/** True when the server refused the connection because it is overloaded (shedding load). */
export function serverIsShedding(err: unknown): boolean {
  return codeOf(err) === SHED_CODE;
}

/**
 * What a TLS error code says about the connection, or undefined when it is not a TLS problem we
 * can explain. `where` is the server's address.
 */
export function explainTlsCode(code: string, where: string, names: TlsSettingNames): string | undefined {
  if (NOT_SIGNED_BY_CA.has(code)) {
    return `the certificate of ${where} is not signed by ${names.ca} (${code}): is ${names.ca} the CA of this proxy server?`;
  }
  if (code === "CERT_HAS_EXPIRED") return `the certificate of ${where} (or a CA in ${names.ca}) has expired`;
  if (code === "CERT_NOT_YET_VALID") return `the certificate of ${where} is not valid yet (check the clocks)`;
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    return `the certificate of ${where} does not name the host that was dialled (ERR_TLS_CERT_ALTNAME_INVALID)`;
  }
  if (code === "ERR_SSL_TLSV1_ALERT_UNKNOWN_CA") {
    return `${where} does not trust ${names.cert}: it is not signed by ${names.serverCa} (TLS alert unknown CA)`;
  }
  if (code === "ERR_SSL_SSLV3_ALERT_CERTIFICATE_EXPIRED") return `${where} refused ${names.cert}: it has expired`;
  if (code === "ERR_SSL_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE") {
    return `${where} refused ${names.cert}: it is not a TLS client certificate (key usage / extended key usage)`;
  }
  if (code === "ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE" || code === "ERR_SSL_TLSV1_ALERT_DECRYPT_ERROR") {
    return `${where} refused ${names.cert} (bad certificate: does ${names.key} belong to it?)`;
  }
  if (code === "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED" || code === "ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE") {
    return `${where} requires a client certificate: set ${names.cert} and ${names.key}`;
  }
  if (code === "ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL") {
    return `wrong port or protocol: ${where} does not speak HTTP/2 over TLS (ALPN h2 refused)`;
  }
  if (NOT_TLS.has(code)) {
    return `wrong port or protocol: ${where} did not answer with TLS (${code}): a plaintext port, or not the proxy server's port`;
  }
  if (code === SHED_CODE) return `${where} is overloaded and shed the connection: retry later`;
  return undefined;
}

/**
 * The message of a failed connection to `where`, naming the certificate, CA or port at fault when
 * the error shows it (the original message follows in brackets), else the error's own message.
 */
export function describeConnectFailure(err: unknown, names: TlsSettingNames, where?: string): string {
  const message = withoutOpensslInternals(errorMessage(err));
  const code = codeOf(err);
  const explained = code ? explainTlsCode(code, where ?? "the proxy server", names) : undefined;
  return explained ? `${explained} [${message}]` : message;
}

/** One OpenSSL error string: optional thread id, `error:<code>:<library>:<function>:<reason>`, then the source file, line and detail. */
const OPENSSL_ERROR =
  /(?:\b[0-9A-F]{6,}:)?error:[0-9A-F]{8}:[^:\n]*:[^:\n]*:([^:\n]+)(?::[^\n]*?\.c:\d+:?)?([^\n\]]*)/g;

/**
 * `text` with OpenSSL's error strings reduced to their reason and detail:
 * `error:0A000412:SSL routines:ssl3_read_bytes:sslv3 alert bad certificate:../deps/openssl/openssl/ssl/record/rec_layer_s3.c:1605:SSL alert number 42`
 * becomes `sslv3 alert bad certificate (SSL alert number 42)`. Other text is kept as it is.
 */
export function withoutOpensslInternals(text: string): string {
  if (!text.includes("error:")) return text;
  return text
    .replace(OPENSSL_ERROR, (_all, reason: string, detail: string) =>
      detail.trim() ? `${reason} (${detail.trim()})` : reason,
    )
    .trim();
}
