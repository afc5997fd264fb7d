/**
 * A work queue of keys for level-based reconcilers: deduplicated, never one key on two workers, per-key
 * exponential backoff, routine failures retried without growing it, {@link TerminalError} not retried.
 * Design: docs/design/addon-manager.md#shape
 */
import { backoffDelay, realClock, type TimerHandle, type Timers } from "@cluster-proxy/kit";

export type ReconcileResult = { requeueAfterMs?: number } | void;

/**
 * A failure a retry cannot mend (a spec that validation refuses): the reconciler has recorded it
 * where users look (a condition or an Event) before throwing; the queue logs it once and does not
 * retry. A change of the object queues the key again.
 */
export class TerminalError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "TerminalError";
  }
}

/** How a {@link WorkQueue} waits before it runs a key again. */
export interface WorkQueueOptions {
  /** The first retry's delay, and a routine failure's every retry (ms, default 500). */
  baseDelayMs?: number;
  /** The longest retry delay (ms, default 60 000). */
  maxDelayMs?: number;
  /** A failure retried after `baseDelayMs` without growing the backoff (a conflict); default none. */
  isRoutine?: (err: unknown) => boolean;
  /** The timers of retries and requeues (default: Node's). */
  timers?: Timers;
}

export class WorkQueue<K extends string = string> {
  private readonly queued = new Set<K>();
  private readonly active = new Set<K>();
  private readonly dirty = new Set<K>();
  private readonly failures = new Map<K, number>();
  private readonly timers = new Map<K, TimerHandle>();
  private waiters: (() => void)[] = [];
  private closed = false;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly isRoutine: (err: unknown) => boolean;
  private readonly clock: Timers;

  constructor(
    private readonly handler: (key: K) => Promise<ReconcileResult>,
    /** A failure: retried in `retryInMs`, or not at all (undefined) for a {@link TerminalError}. */
    private readonly onError: (key: K, err: unknown, retryInMs: number | undefined, routine: boolean) => void,
    options: WorkQueueOptions = {},
  ) {
    this.baseDelayMs = options.baseDelayMs ?? 500;
    this.maxDelayMs = options.maxDelayMs ?? 60_000;
    this.isRoutine = options.isRoutine ?? (() => false);
    this.clock = options.timers ?? realClock;
  }

  add(key: K): void {
    if (this.closed) return;
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    this.queued.add(key);
    this.waiters.shift()?.();
  }

  /** Queue `key` after `ms`; this replaces a pending `addAfter` of the key (the last call wins). */
  addAfter(key: K, ms: number): void {
    if (this.closed) return;
    this.clock.clearTimeout(this.timers.get(key));
    const timer = this.clock.setTimeout(
      () => {
        this.timers.delete(key);
        this.add(key);
      },
      Math.max(0, ms),
    );
    this.timers.set(key, timer);
  }

  /** Process keys until `signal` aborts, with `workers` keys at a time. */
  async run(signal: AbortSignal, workers = 1): Promise<void> {
    signal.addEventListener("abort", () => this.close(), { once: true });
    await Promise.all(Array.from({ length: workers }, () => this.worker()));
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers.values()) this.clock.clearTimeout(t);
    this.timers.clear();
    for (const w of this.waiters.splice(0)) w();
  }

  private async worker(): Promise<void> {
    while (!this.closed) {
      const key = this.queued.values().next().value;
      if (key === undefined) {
        await new Promise<void>((resolve) => this.waiters.push(resolve));
        continue;
      }
      this.queued.delete(key);
      this.active.add(key);
      try {
        const result = await this.handler(key);
        this.failures.delete(key);
        if (result?.requeueAfterMs !== undefined) this.addAfter(key, result.requeueAfterMs);
      } catch (err) {
        if (err instanceof TerminalError) {
          this.failures.delete(key);
          this.onError(key, err, undefined, false);
          continue;
        }
        const routine = this.isRoutine(err);
        const n = this.failures.get(key) ?? 0;
        if (!routine) this.failures.set(key, n + 1);
        const wait = routine ? this.baseDelayMs : backoffDelay(n, this.baseDelayMs, this.maxDelayMs);
        this.onError(key, err, wait, routine);
        this.addAfter(key, wait);
      } finally {
        this.active.delete(key);
        if (this.dirty.delete(key)) this.add(key);
      }
    }
  }
}
