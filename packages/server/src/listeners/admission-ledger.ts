/**
 * Who may wait for a TLS handshake on a port, and in which order: the bounds per phase and source and
 * the round-robin of slots. Pure bookkeeping, no I/O; the handshake pacer feeds it events.
 * Design: docs/design/decisions.md#the-handshake-pacer-and-its-ledger
 */

/** Why the ledger closes a connection. */
export type AdmissionDropReason =
  /** The source already holds --max-handshakes-per-source unfinished connections. */
  | "source_limit"
  /** --max-connections-awaiting-hello connections were waiting for their ClientHello. */
  | "hello_limit";

export interface AdmissionLimits {
  /** Unfinished connections per source address (>= 1). */
  maxPerSource: number;
  /** Connections waiting for their ClientHello per port (>= 1). */
  maxAwaitingHello: number;
  /** Connections with a ClientHello waiting for a slot per port (>= 0). */
  maxQueued: number;
}

/** What the ledger decided about a new connection. */
export interface Arrival<C> {
  /** Whether the new connection was admitted (to wait for its ClientHello). */
  admitted: boolean;
  /** Older connections closed to make room, each with why. */
  evicted: { conn: C; reason: AdmissionDropReason }[];
}

type Phase = "hello" | "queued" | "handshaking";

interface Entry {
  source: string;
  phase: Phase;
}

interface Source<C> {
  /** Connections of this source not through their handshake yet (all phases). */
  unfinished: number;
  /** This source's connections in the `hello` phase, oldest first. */
  awaitingHello: Set<C>;
  /** This source's connections waiting for a slot, oldest first. */
  queued: Set<C>;
}

export class AdmissionLedger<C> {
  private readonly entries = new Map<C, Entry>();
  private readonly sources = new Map<string, Source<C>>();
  /** Every connection in the `hello` phase, oldest first. */
  private readonly awaitingHello = new Set<C>();
  /** Sources with queued connections, in the order their next turn comes. */
  private readonly turns = new Map<string, Source<C>>();
  private queuedCount = 0;

  constructor(private readonly limits: AdmissionLimits) {}

  /** A new connection from `source` (see {@link sourceKey}). */
  arrive(conn: C, source: string): Arrival<C> {
    const evicted: Arrival<C>["evicted"] = [];
    let from = this.sources.get(source);
    if (from && from.unfinished >= this.limits.maxPerSource) {
      const oldest = first(from.awaitingHello);
      if (oldest === undefined) return { admitted: false, evicted };
      this.finished(oldest);
      evicted.push({ conn: oldest, reason: "source_limit" });
    }
    if (this.awaitingHello.size >= this.limits.maxAwaitingHello) {
      const oldest = first(this.awaitingHello);
      if (oldest !== undefined) {
        this.finished(oldest);
        evicted.push({ conn: oldest, reason: "hello_limit" });
      }
    }
    from = this.sources.get(source);
    if (!from) {
      from = { unfinished: 0, awaitingHello: new Set(), queued: new Set() };
      this.sources.set(source, from);
    }
    from.unfinished++;
    from.awaitingHello.add(conn);
    this.awaitingHello.add(conn);
    this.entries.set(conn, { source, phase: "hello" });
    return { admitted: true, evicted };
  }

  /**
   * `conn` sent its ClientHello: it waits for a slot (`queued`; when `slotFree`, its turn comes
   * with the next {@link next}), or is shed because the port's queue is full (`shed`: the ledger
   * forgets it). Unknown connections are `shed`.
   */
  helloed(conn: C, slotFree = false): "queued" | "shed" {
    const entry = this.entries.get(conn);
    const from = entry && this.sources.get(entry.source);
    if (!entry || !from || entry.phase !== "hello") return "shed";
    if (!slotFree && this.queuedCount >= this.limits.maxQueued) {
      this.finished(conn);
      return "shed";
    }
    from.awaitingHello.delete(conn);
    this.awaitingHello.delete(conn);
    entry.phase = "queued";
    from.queued.add(conn);
    this.queuedCount++;
    if (!this.turns.has(entry.source)) this.turns.set(entry.source, from);
    return "queued";
  }

  /** The connection {@link next} would return, left waiting; undefined if none waits. */
  peek(): C | undefined {
    for (const from of this.turns.values()) {
      const conn = first(from.queued);
      if (conn !== undefined) return conn;
    }
    return undefined;
  }

  /** The connection whose turn is next (it moves to `handshaking`), or undefined if none waits. */
  next(): C | undefined {
    for (const [key, from] of this.turns) {
      this.turns.delete(key);
      const conn = first(from.queued);
      if (conn === undefined) continue;
      from.queued.delete(conn);
      this.queuedCount--;
      // The source goes to the back of the line if it has more.
      if (from.queued.size > 0) this.turns.set(key, from);
      const entry = this.entries.get(conn);
      if (entry) entry.phase = "handshaking";
      return conn;
    }
    return undefined;
  }

  /** `conn` is done with admission (handshake finished, connection closed or dropped). Idempotent. */
  finished(conn: C): void {
    const entry = this.entries.get(conn);
    if (!entry) return;
    this.entries.delete(conn);
    this.awaitingHello.delete(conn);
    const from = this.sources.get(entry.source);
    if (!from) return;
    from.awaitingHello.delete(conn);
    if (from.queued.delete(conn)) this.queuedCount--;
    if (from.queued.size === 0) this.turns.delete(entry.source);
    if (--from.unfinished <= 0) this.sources.delete(entry.source);
  }

  /** Whether `conn` is still waiting for its ClientHello. */
  awaitingHelloFrom(conn: C): boolean {
    return this.entries.get(conn)?.phase === "hello";
  }

  /** Connections per phase and the sources holding any (for metrics and tests). */
  counts(): { awaitingHello: number; queued: number; unfinished: number; sources: number } {
    return {
      awaitingHello: this.awaitingHello.size,
      queued: this.queuedCount,
      unfinished: this.entries.size,
      sources: this.sources.size,
    };
  }
}

function first<T>(set: Set<T>): T | undefined {
  for (const value of set) return value;
  return undefined;
}

/**
 * The source a connection counts against: its IPv4 address (also when IPv4-mapped), or the /64
 * of its IPv6 address (one host commonly holds a whole /64, so a finer key is no limit at all).
 */
export function sourceKey(address: string | undefined): string {
  if (!address) return "unknown";
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!address.includes(":")) return address;
  const [head = "", tail] = address.toLowerCase().split("%")[0]!.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined
      ? left
      : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}
