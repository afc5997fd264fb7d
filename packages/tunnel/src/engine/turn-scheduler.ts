/**
 * Fair turns of busy connections on one backed-up stream (the agent's endpoint sockets on its server
 * stream); a function of the `sent` / `nextTurn` calls only, no clock.
 * Design: docs/design/decisions.md#fair-share-of-an-agent-stream-round-robin-between-busy-endpoints
 */

/**
 * Bytes a connection may read into the stream per turn while the stream is backed up and other
 * connections send too. Without it the sockets with the fullest kernel buffers took most of the
 * stream (libuv reads a readable socket up to 32 times 64 KiB in a row), and with the stream budget
 * pausing and resuming all in one fixed order the last connections got nothing. Each quantum costs
 * a pause and a resume of the socket: 64 KiB quanta (one socket read) were as fair but cost 10-25%
 * of the aggregate throughput of 64 downloads; 256 KiB quanta with a 1 MiB stream budget were less
 * fair for 8 downloads, and a 2 MiB budget cost a single download ~25% more CPU.
 */
export const SEND_QUANTUM = 128 * 1024;

interface TurnState {
  /** The turn `sent` counts for. */
  turn: number;
  /** Bytes sent in that turn. */
  sent: number;
  /** Used its quantum: paused until the next turn. */
  waiting: boolean;
}

export class TurnScheduler<C> {
  /** Connections that can send, least recently served first. */
  private readonly order = new Map<C, TurnState>();
  /** Connections paused until the next turn, in the order they used their quantum. */
  private readonly waiting = new Set<C>();
  private turn = 0;
  /** Connections that sent in this turn and in the previous one (a quantum applies only if several did). */
  private turnSenders = 0;
  private lastTurnSenders = 0;

  constructor(readonly quantum: number = SEND_QUANTUM) {}

  /** Connections waiting for the next turn. */
  get waitingCount(): number {
    return this.waiting.size;
  }

  /** Whether `conn` used its quantum and waits for the next turn. */
  isWaiting(conn: C): boolean {
    return this.waiting.has(conn);
  }

  /** `conn` may send from now on (it goes last in the serving order). */
  add(conn: C): void {
    if (!this.order.has(conn)) this.order.set(conn, { turn: -1, sent: 0, waiting: false });
  }

  /** `conn` is gone. */
  remove(conn: C): void {
    this.order.delete(conn);
    this.waiting.delete(conn);
  }

  /**
   * `conn` sent `bytes` into the stream, whose send returned `ok`. Returns true when `conn` must
   * stop reading until {@link nextTurn} hands it back.
   */
  sent(conn: C, bytes: number, ok: boolean): boolean {
    const state = this.order.get(conn);
    if (!state) return false;
    // Least recently served first: move to the end of the serving order.
    this.order.delete(conn);
    this.order.set(conn, state);
    if (state.turn !== this.turn) {
      state.turn = this.turn;
      state.sent = 0;
      this.turnSenders++;
    }
    state.sent += bytes;
    if (ok || state.waiting || state.sent < this.quantum) return false;
    if (this.turnSenders <= 1 && this.lastTurnSenders <= 1) return false; // alone: no quantum
    state.waiting = true;
    this.waiting.add(conn);
    return true;
  }

  /**
   * The stream drained: a new turn. Returns the connections to resume: every connection, least
   * recently served first, when `all` (the stream had paused them all), else those that waited
   * for this turn.
   */
  nextTurn(all: boolean): C[] {
    this.turn++;
    this.lastTurnSenders = this.turnSenders;
    this.turnSenders = 0;
    const waited = [...this.waiting];
    for (const conn of waited) {
      const state = this.order.get(conn);
      if (state) state.waiting = false;
    }
    this.waiting.clear();
    return all ? [...this.order.keys()] : waited;
  }
}
