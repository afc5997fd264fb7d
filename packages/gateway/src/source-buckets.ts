/**
 * A token bucket per source (a caller's address key, {@link sourceKey}): each take
 * spends one token, tokens come back at `ratePerSecond` up to `burst`. The number of sources
 * tracked is bounded: when full, buckets that have refilled (the same as no bucket) are dropped,
 * then the oldest. Time is the injected clock's.
 */
import type { Clock } from "@cluster-proxy/kit";

/** The key of a source address: an IPv4 address itself, an IPv6 one its /64 (one host holds a /64). */
export function sourceKey(address: string | undefined): string {
  if (address === undefined || address === "") return "source:unknown";
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return `source:${mapped[1]}`;
  if (!address.includes(":")) return `source:${address}`;
  return `source:${ipv6Prefix64(address)}`;
}

/** The first four groups of an IPv6 address (its /64), expanded. */
function ipv6Prefix64(address: string): string {
  const bare = address.split("%")[0]!.toLowerCase();
  const gap = bare.indexOf("::");
  const groupsOf = (part: string): string[] => part.split(":").filter((g) => g !== "");
  const left = groupsOf(gap < 0 ? bare : bare.slice(0, gap));
  const right = gap < 0 ? [] : groupsOf(bare.slice(gap + 2));
  const zeros = gap < 0 ? [] : Array<string>(Math.max(0, 8 - left.length - right.length)).fill("0");
  const groups = [...left, ...zeros, ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}

/** Settings of {@link SourceBuckets}. */
export interface SourceBucketsSettings {
  /** Tokens per second (0: unlimited, every take succeeds). */
  ratePerSecond: number;
  /** The most tokens a bucket holds (and starts with). */
  burst: number;
  /** Sources tracked at most (default 10,000). */
  maxSources?: number;
  /** The refills' clock. */
  clock: Clock;
}

/** See the module comment. */
export class SourceBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly maxSources: number;

  constructor(private readonly s: SourceBucketsSettings) {
    this.maxSources = s.maxSources ?? 10_000;
  }

  /** Spend one token of `source`: 0 when there was one, else the seconds until there is one. */
  take(source: string): number {
    if (this.s.ratePerSecond <= 0) return 0;
    const now = this.s.clock.now();
    const b = this.buckets.get(source);
    let tokens = this.s.burst;
    if (b) tokens = Math.min(this.s.burst, b.tokens + ((now - b.at) / 1000) * this.s.ratePerSecond);
    if (tokens < 1) {
      if (b) Object.assign(b, { tokens, at: now });
      return Math.max(1, Math.ceil((1 - tokens) / this.s.ratePerSecond));
    }
    if (b) this.buckets.delete(source);
    else this.makeRoom(now);
    this.buckets.set(source, { tokens: tokens - 1, at: now });
    return 0;
  }

  private makeRoom(now: number): void {
    if (this.buckets.size < this.maxSources) return;
    for (const [k, b] of this.buckets)
      if (b.tokens + ((now - b.at) / 1000) * this.s.ratePerSecond >= this.s.burst) this.buckets.delete(k);
    while (this.buckets.size >= this.maxSources) {
      const oldest = this.buckets.keys().next();
      if (oldest.done) break;
      this.buckets.delete(oldest.value);
    }
  }
}
