/**
 * The connection table of one tunnel stream: its established connections by connectID (the
 * agent allocates connectIDs per stream in Go, so a table belongs to one stream).
 */

/** What the table keys a connection by. */
export interface TableEntry {
  readonly connectID: bigint;
}

/** Connections of one stream by connectID. Removal checks identity, so a stale entry cannot evict its successor. */
export class ConnectionTable<C extends TableEntry> implements Iterable<C> {
  private readonly byID = new Map<bigint, C>();

  get size(): number {
    return this.byID.size;
  }

  get(connectID: bigint): C | undefined {
    return this.byID.get(connectID);
  }

  has(connectID: bigint): boolean {
    return this.byID.has(connectID);
  }

  /** Whether `conn` is the table's entry for its connectID (not a forgotten predecessor). */
  holds(conn: C): boolean {
    return this.byID.get(conn.connectID) === conn;
  }

  /** Add `conn`, replacing any entry with its connectID. */
  add(conn: C): void {
    this.byID.set(conn.connectID, conn);
  }

  /** Remove `conn` if it is the entry for its connectID; false when it was not. */
  remove(conn: C): boolean {
    if (this.byID.get(conn.connectID) !== conn) return false;
    this.byID.delete(conn.connectID);
    return true;
  }

  values(): IterableIterator<C> {
    return this.byID.values();
  }

  [Symbol.iterator](): IterableIterator<C> {
    return this.byID.values();
  }
}
