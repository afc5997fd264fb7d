/**
 * A small expiring cache for hub answers (TokenReview, SubjectAccessReview, ManagedCluster
 * lookups). Each entry has its own lifetime (denials are kept shorter than grants); the number of
 * entries is bounded, the oldest go first. Concurrent lookups of one key share one hub call,
 * aborted once all of them gave up.
 */
import { realClock, type Clock } from "@cluster-proxy/kit";
import { SharedCalls } from "./shared-abort.js";

/** Options of {@link TtlCache}. */
export interface TtlCacheOptions {
  maxEntries?: number;
  /** The clock lifetimes are counted on (default the kit's `realClock`). */
  clock?: Clock;
}

/** See the module comment. */
export class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expires: number }>();
  private readonly loads = new SharedCalls<V>();
  private readonly maxEntries: number;
  private readonly clock: Clock;

  constructor(options: TtlCacheOptions = {}) {
    this.maxEntries = options.maxEntries ?? 10_000;
    this.clock = options.clock ?? realClock;
  }

  /**
   * The cached value of `key`, or `load(signal)`'s, kept for `ttlOf(value)` ms (0: not kept). The
   * lookups of `key` while it loads share the load; its `signal` aborts when the `signal` of every
   * one of them has (none: never).
   */
  async get(
    key: string,
    load: (signal: AbortSignal) => Promise<V>,
    ttlOf: (value: V) => number,
    signal?: AbortSignal,
  ): Promise<V> {
    const hit = this.entries.get(key);
    if (hit && hit.expires > this.clock.now()) return hit.value;
    if (hit) this.entries.delete(key);
    return (
      this.loads.join(key, signal) ??
      this.loads.start(key, signal, async (s) => {
        const value = await load(s);
        this.set(key, value, ttlOf(value));
        return value;
      })
    );
  }

  /** The cached value of `key`, if it has not expired (no load). */
  peek(key: string): V | undefined {
    const hit = this.entries.get(key);
    if (!hit) return undefined;
    if (hit.expires > this.clock.now()) return hit.value;
    this.entries.delete(key);
    return undefined;
  }

  /** Keep `value` for `key` for `ttlMs` (0: not kept); the oldest entry goes when the cache is full. */
  set(key: string, value: V, ttlMs: number): void {
    if (ttlMs <= 0) return;
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, { value, expires: this.clock.now() + ttlMs });
  }

  /** Entries held (expired ones included until they are looked up or pushed out). */
  get size(): number {
    return this.entries.size;
  }

  /** Forget `key`. */
  delete(key: string): void {
    this.entries.delete(key);
  }
}
