/**
 * Connecting again when no proxy server took a connection: refused, reset or without a host
 * before its TLS handshake ended, so nothing was sent. The hub's Service may still send a new
 * connection to a proxy-server that just died; the next one may reach a live replica. Used by
 * `TunnelClient` (and so `dial`) and `dialConnect`.
 */
import { Backoff, delay, type Timers } from "@cluster-proxy/kit";

/** Connections tried in all: with one replica of three dead behind a Service, all five fail one time in 243. */
const CONNECT_ATTEMPTS = 5;

/** The pauses between them: 50, 100, 200, 400 ms (and up to 10% more). */
const CONNECT_RETRY_BACKOFF = { initialMs: 50, capMs: 400, factor: 2 };

/** How {@link connectAgain} tells, waits and gives up; `E` is the error of a connection no server took. */
export interface ConnectAgainOptions<E extends Error> {
  /** Whether `err` is a connection no server took. */
  unreached(err: unknown): err is E;
  /** Ends the pauses, and the attempts, at once (the client closed, the dial was cancelled). */
  stop?: AbortSignal | undefined;
  timers: Timers;
  /** Milliseconds left for the attempts (a deadline): no pause runs past it. Absent: no deadline. */
  timeLeftMs?: () => number;
  /** The error when the time ran out before another attempt (default: the last failure as it is). */
  outOfTime?: (err: unknown) => Error;
  /** Told before each pause. */
  onRetry?: (attempt: number, pauseMs: number, err: unknown) => void;
  /**
   * The error after {@link CONNECT_ATTEMPTS} connections none of which was taken: the last one's
   * `err`, with `note` (`(5 connections, none taken)`) to append to its message.
   */
  exhausted: (err: E, note: string) => Error;
}

/**
 * `connect()`, called again (a new connection each time, up to {@link CONNECT_ATTEMPTS} in all,
 * after the backoff's pauses) while it fails with a connection no server took and time is left.
 * Any other failure, or a stop, ends it with the failure as it is.
 */
export async function connectAgain<T, E extends Error>(
  connect: () => Promise<T>,
  o: ConnectAgainOptions<E>,
): Promise<T> {
  const backoff = new Backoff(CONNECT_RETRY_BACKOFF);
  const timeLeft = (): number => o.timeLeftMs?.() ?? Infinity;
  for (let attempt = 1; ; attempt++) {
    try {
      return await connect();
    } catch (err) {
      if (!o.unreached(err) || o.stop?.aborted) throw err;
      if (attempt >= CONNECT_ATTEMPTS) throw o.exhausted(err, `(${attempt} connections, none taken)`);
      if (timeLeft() <= 0) throw o.outOfTime?.(err) ?? err;
      const pause = Math.min(backoff.next(), timeLeft());
      o.onRetry?.(attempt, pause, err);
      await delay(pause, o.stop ?? new AbortController().signal, o.timers);
      if (o.stop?.aborted) throw err;
      if (timeLeft() <= 0) throw o.outOfTime?.(err) ?? err;
    }
  }
}
