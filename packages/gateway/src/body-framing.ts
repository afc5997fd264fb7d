/**
 * How a caller's request body is delimited (none, a declared length, streamed to its end), decided
 * before anything goes to a cluster: the second check after Node's parser, the only one for HTTP/2.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import type { IncomingHttpHeaders } from "node:http";
import { GatewayError } from "./gateway-error.js";

/** Methods whose body has no defined meaning (RFC 9110): a body needs a declared length. */
export const BODYLESS_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "DELETE", "OPTIONS"]);

/** How a request body is delimited. */
export type BodyFraming =
  | { body: "none" }
  | { body: "length"; length: number }
  /** Streamed to its end (HTTP/2 END_STREAM upstream; chunked on the agent's HTTP/1.1 legs). */
  | { body: "stream" };

const DECIMAL = /^[0-9]{1,15}$/;

function refuse(why: string): GatewayError {
  return new GatewayError(400, "bad-request", `refused: ${why}`);
}

/**
 * The framing of a request's body, or a 400 GatewayError. `h2EndAfterHeaders` is, for an HTTP/2
 * caller, whether its HEADERS frame ended the stream (undefined for HTTP/1.1 callers).
 */
export function bodyFraming(
  method: string,
  headers: IncomingHttpHeaders,
  h2EndAfterHeaders: boolean | undefined,
): BodyFraming {
  const te = headers["transfer-encoding"];
  const clText = headers["content-length"];
  let length: number | undefined;
  if (clText !== undefined) {
    if (!DECIMAL.test(clText.trim())) throw refuse(`Content-Length ${JSON.stringify(clText)} is not a length`);
    length = Number(clText.trim());
  }
  if (h2EndAfterHeaders === undefined) {
    // HTTP/1.1: llhttp refused CL with TE and any coding but a final chunked.
    if (te !== undefined) {
      if (length !== undefined) throw refuse("both Content-Length and Transfer-Encoding");
      if (BODYLESS_METHODS.has(method))
        throw refuse(`a ${method} request with a body needs Content-Length (Transfer-Encoding: ${te})`);
      return { body: "stream" };
    }
    return length ? { body: "length", length } : { body: "none" };
  }
  if (te !== undefined) throw refuse("Transfer-Encoding is not allowed in HTTP/2");
  if (h2EndAfterHeaders) {
    if (length) throw refuse(`content-length ${length} on a request without DATA`);
    return { body: "none" };
  }
  if (length !== undefined) return { body: "length", length };
  if (BODYLESS_METHODS.has(method)) throw refuse(`a ${method} request with a body needs content-length`);
  return { body: "stream" };
}

/**
 * Check an upgrade request: it carries no body (the upgraded stream is its payload), so any
 * `Transfer-Encoding` or a non-zero `Content-Length` is refused.
 */
export function checkUpgradeFraming(headers: IncomingHttpHeaders): void {
  if (headers["transfer-encoding"] !== undefined) throw refuse("an upgrade request with Transfer-Encoding");
  const cl = headers["content-length"];
  if (cl !== undefined && cl.trim() !== "0") throw refuse("an upgrade request with a body");
}
