/**
 * The clock of protocol timers (dial deadlines, lingers, stall checks): components take one so
 * that tests drive time instead of sleeping ({@link ManualClock} in `@cluster-proxy/kit/testing`).
 */

/** A pending timer of a {@link Timers} (undefined: none). */
export type TimerHandle = unknown;

/** Schedules and cancels one-shot timers. */
export interface Timers {
  /**
   * Run `fn` once after `ms` milliseconds; the timer must not keep the process alive (but
   * {@link keepAliveClock}'s, for a wait that is all its process is there for).
   */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  /** Cancel a timer `setTimeout` returned (a fired or unknown one is ignored). */
  clearTimeout(handle: TimerHandle): void;
}

/** Timers and the time they run on. */
export interface Clock extends Timers {
  /**
   * Milliseconds. For timers and caches only differences between two readings mean anything;
   * what checks a time of the world (a certificate's or token's validity, a status timestamp)
   * reads it as Unix ms, as `realClock`'s and `keepAliveClock`'s are (a test's `ManualClock` is
   * advanced to such a time first).
   */
  now(): number;
}

/** Node's timers, unref'd, and `Date.now`. */
export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout(fn, ms) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return timer;
  },
  clearTimeout(handle) {
    if (handle !== undefined) clearTimeout(handle as NodeJS.Timeout);
  },
};

/**
 * Node's timers, ref'd, and `Date.now`: for a loop whose waiting is what keeps its process alive
 * (the agent's connect loop between attempts, with no port open).
 */
export const keepAliveClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout(handle) {
    if (handle !== undefined) clearTimeout(handle as NodeJS.Timeout);
  },
};
