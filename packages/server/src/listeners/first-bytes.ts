/**
 * What a connection's first bytes say about its protocol, read before any TLS work: a complete
 * ClientHello admits it to the handshake queue; plain HTTP on a TLS port, or TLS at the plain CONNECT
 * door, is answered at once.
 * Design: docs/design/decisions.md#the-handshake-pacer-and-its-ledger
 */

/** TLS record type `handshake`. */
const TLS_HANDSHAKE_RECORD = 0x16;
/** Handshake message type `client_hello`. */
const CLIENT_HELLO = 0x01;
/** Largest TLS plaintext record (2^14) a ClientHello may come in. */
const MAX_RECORD_LENGTH = 16_384;

export type FirstBytes =
  /** Not enough bytes yet to tell. */
  | { kind: "incomplete" }
  /** A complete TLS record carrying (the start of) a ClientHello. */
  | { kind: "client-hello" }
  /** A plain HTTP request (a request line starts with an upper-case method). */
  | { kind: "http" }
  /** Anything else: not a TLS client. */
  | { kind: "not-tls"; reason: string };

/** Whether `bytes` start like a TLS handshake record (a ClientHello, most likely). */
export function looksLikeTls(bytes: Buffer): boolean {
  return bytes.length > 0 && bytes[0] === TLS_HANDSHAKE_RECORD;
}

/**
 * Classify the first bytes a client sent to a TLS port. A ClientHello is recognised by its record
 * header (type 22, version 3.x, a plausible length) and its first handshake byte; the whole first
 * record must have arrived (node's TLS server then has all it needs to answer at once).
 */
export function classifyFirstBytes(bytes: Buffer): FirstBytes {
  if (bytes.length === 0) return { kind: "incomplete" };
  const first = bytes[0]!;
  if (isUpper(first)) return requestLine(bytes);
  if (first !== TLS_HANDSHAKE_RECORD) return { kind: "not-tls", reason: `first byte 0x${hex(first)}` };
  if (bytes.length >= 2 && bytes[1] !== 0x03)
    return { kind: "not-tls", reason: `TLS record version 0x${hex(bytes[1]!)}` };
  if (bytes.length < 5) return { kind: "incomplete" };
  const length = bytes.readUInt16BE(3);
  if (length === 0 || length > MAX_RECORD_LENGTH) return { kind: "not-tls", reason: `TLS record length ${length}` };
  if (bytes.length >= 6 && bytes[5] !== CLIENT_HELLO)
    return { kind: "not-tls", reason: `handshake message type ${bytes[5]} instead of a ClientHello` };
  return bytes.length >= 5 + length ? { kind: "client-hello" } : { kind: "incomplete" };
}

/** TLS extension `pre_shared_key` (RFC 8446 4.2.11): the tickets a client offers to resume with. */
const PRE_SHARED_KEY_EXTENSION = 41;

/**
 * The first PSK identity (a session ticket) of the ClientHello in the first TLS record of
 * `bytes`, or undefined: no ticket offered (a full handshake), or a ClientHello that does not fit
 * its first record (then the pacer treats it as a full handshake). Never throws.
 */
export function clientHelloTicket(bytes: Buffer): Buffer | undefined {
  if (bytes.length < 9 || bytes[0] !== TLS_HANDSHAKE_RECORD || bytes[5] !== CLIENT_HELLO) return undefined;
  const recordEnd = Math.min(bytes.length, 5 + bytes.readUInt16BE(3));
  const helloEnd = Math.min(recordEnd, 9 + bytes.readUIntBE(6, 3));
  // version (2), random (32)
  let at = 9 + 2 + 32;
  const skip = (lengthBytes: 1 | 2): boolean => {
    if (at + lengthBytes > helloEnd) return false;
    at += lengthBytes + bytes.readUIntBE(at, lengthBytes);
    return at <= helloEnd;
  };
  // session id, cipher suites, compression methods
  if (!skip(1) || !skip(2) || !skip(1)) return undefined;
  if (at + 2 > helloEnd) return undefined;
  const extensionsEnd = Math.min(helloEnd, at + 2 + bytes.readUInt16BE(at));
  at += 2;
  while (at + 4 <= extensionsEnd) {
    const type = bytes.readUInt16BE(at);
    const length = bytes.readUInt16BE(at + 2);
    const body = at + 4;
    if (body + length > extensionsEnd) return undefined;
    if (type === PRE_SHARED_KEY_EXTENSION) {
      // identities<7..2^16-1>: identity<1..2^16-1>, obfuscated_ticket_age (4)
      if (length < 4) return undefined;
      const identityLength = bytes.readUInt16BE(body + 2);
      if (identityLength === 0 || body + 4 + identityLength > body + length) return undefined;
      return bytes.subarray(body + 4, body + 4 + identityLength);
    }
    at = body + length;
  }
  return undefined;
}

/** Longest request method we wait for (the registered ones are at most 17 letters). */
const MAX_METHOD = 20;

function isUpper(byte: number): boolean {
  return byte >= 0x41 && byte <= 0x5a;
}

/** An HTTP request line starts with an upper-case method and a space (`GET `, `PRI `, `CONNECT `). */
function requestLine(bytes: Buffer): FirstBytes {
  for (let i = 0; i < Math.min(bytes.length, MAX_METHOD + 1); i++) {
    const byte = bytes[i]!;
    if (byte === 0x20 && i > 0) return { kind: "http" };
    if (!isUpper(byte) && byte !== 0x5f && byte !== 0x2d)
      return { kind: "not-tls", reason: `"${bytes.subarray(0, i + 1).toString("latin1")}"...` };
  }
  return bytes.length > MAX_METHOD ? { kind: "not-tls", reason: "a long upper-case word" } : { kind: "incomplete" };
}

function hex(byte: number): string {
  return byte.toString(16).padStart(2, "0");
}

/** The answer of a TLS port to a plain HTTP request, naming the port's flag (kit's, shared with the gateway). */
export { plainHttpOnTlsPortResponse } from "@cluster-proxy/kit";
