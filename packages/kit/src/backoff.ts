/**
 * The two backoffs of the components. {@link Backoff}: jittered exponential backoff as
 * konnectivity agents use it (agents, the gateway's watches). {@link backoffDelay}: exponential
 * with equal jitter by attempt number (the addon manager's work queue and watches). {@link delay}:
 * an abortable wait.
 */
import { keepAliveClock, type Timers } from "./clock.js";

/**
 * Jittered exponential backoff, as konnectivity agents use it: start at `initialMs`, multiply by
 * `factor` per failure, add up to `jitter` x the delay at random, never exceed `capMs`.
 */
export interface BackoffOptions {
  initialMs: number;
  capMs: number;
  factor?: number;
  jitter?: number;
  /** Random source in [0, 1) (inject for tests). */
  random?: () => number;
}

export class Backoff {
  private attempt = 0;
  constructor(private readonly options: BackoffOptions) {}

  /** Delay before the next attempt; each call counts one more failure. */
  next(): number {
    const { initialMs, capMs, factor = 1.5, jitter = 0.1, random = Math.random } = this.options;
    const base = Math.min(capMs, initialMs * factor ** this.attempt);
    this.attempt++;
    return Math.min(capMs, Math.round(base * (1 + jitter * random())));
  }

  /** Forget past failures (after a success). */
  reset(): void {
    this.attempt = 0;
  }

  get failures(): number {
    return this.attempt;
  }
}

/** Exponential backoff with full jitter: attempt 0 waits up to `baseMs`, doubling to `maxMs`. */
export function backoffDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 20));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** Resolves after `ms` on `timers` (default ref'd real timers: the wait is what its caller is there for), or at once when `signal` aborts. */
export function delay(ms: number, signal: AbortSignal, timers: Timers = keepAliveClock): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = timers.setTimeout(done, ms);
    function done(): void {
      timers.clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
