/** Test-only: a {@link Clock} that moves only when a test advances it. */
import type { Clock, TimerHandle } from "../clock.js";

/** Timers that fire only when the test advances the clock, in the order they are due. */
export class ManualClock implements Clock {
  private at = 0;
  private readonly pending = new Map<number, { at: number; fn: () => void }>();
  private nextId = 1;

  /** Milliseconds advanced since the clock was made. */
  now(): number {
    return this.at;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    this.pending.set(id, { at: this.at + ms, fn });
    return id;
  }

  clearTimeout(handle: TimerHandle): void {
    if (typeof handle === "number") this.pending.delete(handle);
  }

  /** How many timers are waiting. */
  get armed(): number {
    return this.pending.size;
  }

  /**
   * Move the clock `ms` forward and fire every timer due by then, earliest first (a timer armed
   * by one that fires runs too if it is due by then).
   */
  advance(ms: number): void {
    const until = this.at + ms;
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const entry of this.pending) if (entry[1].at <= until && (!next || entry[1].at < next[1].at)) next = entry;
      if (!next) break;
      this.pending.delete(next[0]);
      this.at = next[1].at;
      next[1].fn();
    }
    this.at = until;
  }
}
