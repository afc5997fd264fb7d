/**
 * The CLI's exit statuses: one table from error codes (the catalog of `@cluster-proxy/errors`)
 * to the status `cluster-proxy` exits with. 0 is success; 2 means the command line or a file it
 * names is wrong (fix the invocation); 1 is every failure while running. docs/reference/errors.md is
 * generated from this table and the catalog.
 */
import { isClusterProxyError, type ErrorCode } from "@cluster-proxy/api";

/** Exit status of a command line or configuration the user must fix. */
export const EXIT_USAGE = 2;
/** Exit status of a failure while running (and of errors outside the catalog). */
export const EXIT_FAILURE = 1;

/** The exit status for each code; every code of the catalog has one. */
export const EXIT_STATUS_BY_CODE: Readonly<Record<ErrorCode, typeof EXIT_USAGE | typeof EXIT_FAILURE>> = {
  CP_ERR_CONFIG: EXIT_USAGE,
  CP_ERR_USAGE: EXIT_USAGE,
  CP_ERR_COMMAND: EXIT_FAILURE,
  CP_ERR_PORT_IN_USE: EXIT_FAILURE,
  CP_ERR_DIAL_FAILED: EXIT_FAILURE,
  CP_ERR_TUNNEL_CLOSED: EXIT_FAILURE,
  CP_ERR_PROTOCOL: EXIT_FAILURE,
  CP_ERR_CONNECT: EXIT_FAILURE,
  CP_ERR_PROXY: EXIT_FAILURE,
  CP_ERR_TIMEOUT: EXIT_FAILURE,
  CP_ERR_PACKET_DECODE: EXIT_FAILURE,
  CP_ERR_AGENT_IDENTIFIERS: EXIT_FAILURE,
  CP_ERR_AGENT_AUTH: EXIT_FAILURE,
  CP_ERR_DESTINATION_REFUSED: EXIT_FAILURE,
  CP_ERR_TLS_FILE: EXIT_USAGE,
  CP_ERR_CERTIFICATE: EXIT_FAILURE,
  CP_ERR_KUBE_API: EXIT_FAILURE,
};

/**
 * The exit status for the error a command ended with: that of its code (a command that wraps an
 * error decides by the wrapper's code), {@link EXIT_FAILURE} for errors outside the catalog.
 */
export function exitStatusOf(err: unknown): number {
  return isClusterProxyError(err) ? EXIT_STATUS_BY_CODE[err.code] : EXIT_FAILURE;
}
