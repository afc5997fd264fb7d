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
