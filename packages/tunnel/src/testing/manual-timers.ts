/** Test-only: an {@link EngineTimers} clock that moves only when a test advances it. */
import type { EngineTimers } from "../engine/timers.js";

/** Timers that fire only when the test advances the clock, in the order they are due. */
export class ManualTimers implements EngineTimers {
  now = 0;
  private readonly pending = new Map<number, { at: number; fn: () => void }>();
  private nextId = 1;
  setTimeout(fn: () => void, ms: number): number {
    const id = this.nextId++;
    this.pending.set(id, { at: this.now + ms, fn });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  /** How many timers are waiting. */
  get armed(): number {
    return this.pending.size;
  }
  /** Move the clock `ms` forward and fire every timer due by then. */
  advance(ms: number): void {
    this.now += ms;
    for (const [id, t] of [...this.pending].sort((x, y) => x[1].at - y[1].at)) {
      if (t.at > this.now) break;
      this.pending.delete(id);
      t.fn();
    }
  }
}
