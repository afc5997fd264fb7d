/** The engine's clock: stall timers go through it, so tests drive time instead of sleeping. */

/** A pending timer of an {@link EngineTimers} (undefined: none). */
export type TimerHandle = unknown;

/** Schedules and cancels one-shot timers. */
export interface EngineTimers {
  /** Run `fn` once after `ms` milliseconds; the timer must not keep the process alive. */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** Node's timers, unref'd. */
export const realTimers: EngineTimers = {
  setTimeout(fn, ms) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return timer;
  },
  clearTimeout(handle) {
    clearTimeout(handle as NodeJS.Timeout);
  },
};
