/**
 * Header names that belong to one connection, not to the message: hop-by-hop (RFC 9110 7.6.1)
 * and those HTTP/2 forbids (RFC 9113 8.2.2). A relay never copies them from one leg to the next.
 */
export const CONNECTION_SPECIFIC_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "http2-settings",
  "host",
]);
