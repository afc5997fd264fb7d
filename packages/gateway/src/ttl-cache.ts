/**
 * A small expiring cache for hub answers (TokenReview, SubjectAccessReview, ManagedCluster
 * lookups). Each entry has its own lifetime (denials are kept shorter than grants); the number of
 * entries is bounded, the oldest go first. Concurrent lookups of one key share one hub call.
 */

/** Clock (milliseconds), injectable in tests. */
export type Clock = () => number;

/** Options of {@link TtlCache}. */
export interface TtlCacheOptions {
  maxEntries?: number;
  now?: Clock;
}

/** See the module comment. */
export class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expires: number }>();
  private readonly pending = new Map<string, Promise<V>>();
  private readonly maxEntries: number;
  private readonly now: Clock;

  constructor(options: TtlCacheOptions = {}) {
    this.maxEntries = options.maxEntries ?? 10_000;
    this.now = options.now ?? Date.now;
  }

  /** The cached value of `key`, or `load()`'s, kept for `ttlOf(value)` ms (0: not kept). */
  async get(key: string, load: () => Promise<V>, ttlOf: (value: V) => number): Promise<V> {
    const hit = this.entries.get(key);
    if (hit && hit.expires > this.now()) return hit.value;
    if (hit) this.entries.delete(key);
    const running = this.pending.get(key);
    if (running) return running;
    const p = load().then((value) => {
      const ttl = ttlOf(value);
      if (ttl > 0) {
        if (this.entries.size >= this.maxEntries) {
          const oldest = this.entries.keys().next();
          if (!oldest.done) this.entries.delete(oldest.value);
        }
        this.entries.set(key, { value, expires: this.now() + ttl });
      }
      return value;
    });
    this.pending.set(key, p);
    try {
      return await p;
    } finally {
      this.pending.delete(key);
    }
  }

  /** Forget `key`. */
  delete(key: string): void {
    this.entries.delete(key);
  }
}
