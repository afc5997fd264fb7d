/**
 * Runs a periodic job per key (the fleet view's latency probe per cluster) with bounded
 * concurrency: at most `concurrency` jobs at once in all, never two at once for one key, each key
 * again `intervalMs` after its last job ended. A slow fleet stretches the rounds instead of
 * piling jobs up, so at any number of keys the work in flight stays bounded.
 */
import { realClock, type Clock, type TimerHandle } from "@cluster-proxy/kit";

/** Options of {@link ProbeScheduler}. */
export interface ProbeSchedulerOptions {
  intervalMs: number;
  concurrency: number;
  /** The job of `key`; it should not reject (a rejection is ignored). */
  run(key: string): Promise<void>;
  /** When keys are due, and the timer to the next one (default the kit's `realClock`). */
  clock?: Clock;
}

/** See the module comment. */
export class ProbeScheduler {
  /** When each key is due next (on the clock). */
  private readonly due = new Map<string, number>();
  private readonly running = new Set<string>();
  private timer: TimerHandle;
  private stopped = true;
  private readonly clock: Clock;

  constructor(private readonly o: ProbeSchedulerOptions) {
    this.clock = o.clock ?? realClock;
  }

  /** Jobs running now. */
  get inFlight(): number {
    return this.running.size;
  }

  /** Start running jobs. */
  start(): void {
    this.stopped = false;
    this.pump();
  }

  /** Stop starting jobs (running ones finish). */
  stop(): void {
    this.stopped = true;
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Run `key`'s job from now on (at once, the first time). */
  add(key: string): void {
    if (this.due.has(key)) return;
    this.due.set(key, this.clock.now());
    this.pump();
  }

  /** Stop running `key`'s job (one running finishes). */
  remove(key: string): void {
    this.due.delete(key);
  }

  /** Whether `key` is scheduled. */
  has(key: string): boolean {
    return this.due.has(key);
  }

  private pump(): void {
    if (this.stopped) return;
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    while (this.running.size < this.o.concurrency) {
      let next: string | undefined;
      let at = Infinity;
      for (const [key, due] of this.due)
        if (due < at && !this.running.has(key)) {
          next = key;
          at = due;
        }
      if (next === undefined) return;
      const wait = at - this.clock.now();
      if (wait > 0) {
        this.timer = this.clock.setTimeout(() => this.pump(), wait);
        return;
      }
      this.launch(next);
    }
  }

  private launch(key: string): void {
    this.running.add(key);
    this.due.set(key, Infinity);
    const done = (): void => {
      this.running.delete(key);
      if (this.due.has(key)) this.due.set(key, this.clock.now() + this.o.intervalMs);
      this.pump();
    };
    this.o.run(key).then(done, done);
  }
}
