/**
 * TLS session ticket keys of the proxy-server's doors: the shared key file (current, previous),
 * per-door keys derived with HKDF, and the previous key's twin server the pacer routes tickets to.
 * Design: docs/design/decisions.md#tls-13-session-resumption-issue-41
 */
import { createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";

/** Bytes of a node ticket key: name (16), HMAC secret (16), AES key (16). */
export const TICKET_KEY_BYTES = 48;
/** Bytes of a ticket key's name, which node writes at the start of every ticket. */
const TICKET_KEY_NAME_BYTES = 16;

/** The keys of a file (or of a server without one). */
export interface TicketKeySet {
  current: Buffer;
  previous?: Buffer;
}

/** Parse a key file: one base64 48-byte key per line (blank lines and `#` comments skipped), newest first. */
export function parseTicketKeyFile(content: Buffer | string): TicketKeySet {
  const keys: Buffer[] = [];
  const lines = content.toString("utf8").split(/\r?\n/);
  for (const [i, raw] of lines.entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(line)) throw new Error(`line ${i + 1}: not base64`);
    const key = Buffer.from(line, "base64");
    if (key.length !== TICKET_KEY_BYTES)
      throw new Error(`line ${i + 1}: a key must be ${TICKET_KEY_BYTES} bytes, got ${key.length}`);
    keys.push(key);
  }
  const [current, previous] = keys;
  if (!current) throw new Error("no key in the file");
  return previous ? { current, previous } : { current };
}

/** A key file's text for `keys` (newest first), as the addon manager writes it. */
export function formatTicketKeyFile(keys: readonly Buffer[]): string {
  return keys.map((k) => k.toString("base64")).join("\n") + "\n";
}

/** A fresh random key set (a server without a key file: tickets resume only on itself). */
export function randomTicketKeys(): TicketKeySet {
  return { current: randomBytes(TICKET_KEY_BYTES) };
}

/**
 * The key of `door` (e.g. "agent", "grpc", "http-connect") derived from a file key and `trust`,
 * a digest of the CA file the door verifies client certificates with ({@link trustDigest}): a
 * ticket resumes only where the same CAs are trusted as when its full handshake verified the chain.
 */
export function doorTicketKey(fileKey: Buffer, door: string, trust = ""): Buffer {
  return Buffer.from(
    hkdfSync("sha256", fileKey, "cluster-proxy ticket keys", `door=${door};trust=${trust}`, TICKET_KEY_BYTES),
  );
}

/** The digest of a door's CA file that its keys are derived with ("" for a door without one). */
export function trustDigest(caFile: Buffer | undefined): string {
  return caFile ? createHash("sha256").update(caFile).digest("hex") : "";
}

/** The session id context of `door`: OpenSSL resumes a session only in the context it was made in. */
export function doorSessionIdContext(door: string): string {
  return createHash("sha256").update(`cluster-proxy/${door}`).digest("hex").slice(0, 32);
}

/** The name a ticket starts with (undefined when too short to be one of node's). */
function ticketKeyName(ticket: Buffer): Buffer | undefined {
  return ticket.length >= TICKET_KEY_NAME_BYTES ? ticket.subarray(0, TICKET_KEY_NAME_BYTES) : undefined;
}

/** Bytes of the HMAC-SHA256 that ends each of node's tickets. */
const TICKET_MAC_BYTES = 32;

/**
 * Whether `ticket` (a ClientHello's PSK identity) was made with `key`: it names the key and its
 * HMAC-SHA256 (node's ticket format: key name, IV, encrypted session, HMAC over the rest, keyed
 * with the key's second 16 bytes) checks out. A made-up ticket that copies a real key name fails.
 */
export function ticketMadeWith(ticket: Buffer, key: Buffer): boolean {
  const name = ticketKeyName(ticket);
  if (!name || ticket.length <= TICKET_KEY_NAME_BYTES + TICKET_MAC_BYTES) return false;
  if (!timingSafeEqual(name, key.subarray(0, TICKET_KEY_NAME_BYTES))) return false;
  const macAt = ticket.length - TICKET_MAC_BYTES;
  const mac = createHmac("sha256", key.subarray(TICKET_KEY_NAME_BYTES, 2 * TICKET_KEY_NAME_BYTES))
    .update(ticket.subarray(0, macAt))
    .digest();
  return timingSafeEqual(mac, ticket.subarray(macAt));
}
