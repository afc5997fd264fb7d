/**
 * A work queue of keys for level-based reconcilers: a key queued several times is processed once;
 * a key is never processed by two workers at once (a key queued while it is being processed runs
 * again afterwards); failures are retried with per-key exponential backoff; `addAfter` requeues
 * later (e.g. before a certificate must be rotated). A routine failure (`isRoutine`, e.g. a 409
 * Conflict because the cache lagged behind a write) is retried after the base delay and does not
 * grow the backoff; `onError` gets it with `routine` true.
 */
import { backoffDelay } from "./backoff.js";

export type ReconcileResult = { requeueAfterMs?: number } | void;

export class WorkQueue {
  private readonly queued = new Set<string>();
  private readonly active = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private waiters: (() => void)[] = [];
  private closed = false;

  constructor(
    private readonly handler: (key: string) => Promise<ReconcileResult>,
    private readonly onError: (key: string, err: unknown, retryInMs: number, routine: boolean) => void,
    private readonly baseDelayMs = 500,
    private readonly maxDelayMs = 60_000,
    private readonly isRoutine: (err: unknown) => boolean = () => false,
  ) {}

  add(key: string): void {
    if (this.closed) return;
    if (this.active.has(key)) {
      this.dirty.add(key);
      return;
    }
    this.queued.add(key);
    this.waiters.shift()?.();
  }

  /** Queue `key` after `ms` (an earlier pending `addAfter` for the key wins if sooner). */
  addAfter(key: string, ms: number): void {
    if (this.closed) return;
    const existing = this.timers.get(key);
    if (existing) clearTimeout(existing);
    const timer = setTimeout(
      () => {
        this.timers.delete(key);
        this.add(key);
      },
      Math.max(0, ms),
    );
    timer.unref();
    this.timers.set(key, timer);
  }

  /** Process keys until `signal` aborts, with `workers` keys at a time. */
  async run(signal: AbortSignal, workers = 1): Promise<void> {
    signal.addEventListener("abort", () => this.close(), { once: true });
    await Promise.all(Array.from({ length: workers }, () => this.worker()));
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers.values()) clearTimeout(t);
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
