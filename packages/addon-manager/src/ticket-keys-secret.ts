/**
 * The proxy-servers' TLS session ticket keys (issue 41): one Secret per configuration, mounted into
 * every replica (--tls-session-ticket-key-file), so a ticket one replica issued resumes at any
 * other. The manager rotates the key every {@link TICKET_KEY_ROTATION_MS}: the new key goes first,
 * the one it replaces stays second for one more period (the servers still accept its tickets, see
 * the server's ticket-keys.ts), the one before is dropped. The servers re-read the file by content,
 * so a rotation needs no restart.
 */
import { randomBytes } from "node:crypto";
import type { SecretObject } from "./certificate-authority.js";

/** How often the manager replaces the current ticket key (a ticket lives at most an hour by default). */
export const TICKET_KEY_ROTATION_MS = 12 * 3_600_000;
/** The Secret's key that holds the key file. */
export const TICKET_KEYS_FILE = "ticket-keys";
/** When the current key was made (RFC 3339). */
export const TICKET_KEYS_ROTATED_AT = "proxy.open-cluster-management.io/ticket-keys-rotated-at";
/** Bytes of one node ticket key. */
const KEY_BYTES = 48;

/** The ticket keys Secret of configuration `name`. */
export function ticketKeysSecretName(name: string): string {
  return `${name}-tls-ticket-keys`;
}

/** The keys of a key file (base64 lines, newest first); lines that are not a 48-byte key are skipped. */
function keysOf(file: string): Buffer[] {
  return file
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => /^[A-Za-z0-9+/]+={0,2}$/.test(l))
    .map((l) => Buffer.from(l, "base64"))
    .filter((k) => k.length === KEY_BYTES);
}

/** What the Secret should hold now, and when to look again. */
export interface TicketKeysPlan {
  /** The key file: the current key, then the previous one (if any). */
  file: string;
  rotatedAt: Date;
  /** Why the keys changed (undefined: unchanged). */
  change?: "created" | "rotated";
  /** Until the next rotation (ms). */
  recheckMs: number;
}

/**
 * The key file for a Secret that holds `existing` (its `ticket-keys` decoded, its rotated-at
 * annotation) at `now`: a new key when there is none or the current one is a period old (the
 * current one then becomes the previous one); else unchanged.
 */
export function planTicketKeys(
  existing: { file: string; rotatedAt: string | undefined } | undefined,
  now: number,
  periodMs = TICKET_KEY_ROTATION_MS,
  newKey: () => Buffer = () => randomBytes(KEY_BYTES),
): TicketKeysPlan {
  const keys = existing ? keysOf(existing.file) : [];
  const rotatedAt = existing?.rotatedAt ? Date.parse(existing.rotatedAt) : NaN;
  const current = keys[0];
  if (current && Number.isFinite(rotatedAt) && rotatedAt <= now && now - rotatedAt < periodMs) {
    return {
      file: existing?.file ?? "",
      rotatedAt: new Date(rotatedAt),
      recheckMs: Math.max(1_000, rotatedAt + periodMs - now),
    };
  }
  const fresh = newKey();
  const file = [fresh, ...(current ? [current] : [])].map((k) => k.toString("base64")).join("\n") + "\n";
  return { file, rotatedAt: new Date(now), change: current ? "rotated" : "created", recheckMs: periodMs };
}

/** The decoded state of a ticket keys Secret, for {@link planTicketKeys}. */
export function ticketKeysOf(
  secret: SecretObject | undefined,
): { file: string; rotatedAt: string | undefined } | undefined {
  const data = secret?.data?.[TICKET_KEYS_FILE];
  if (!secret || !data) return undefined;
  return {
    file: Buffer.from(data, "base64").toString("utf8"),
    rotatedAt: secret.metadata.annotations?.[TICKET_KEYS_ROTATED_AT],
  };
}
