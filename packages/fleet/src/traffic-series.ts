/**
 * A cluster's traffic over the last 15 minutes in 5 s buckets: a ring of {@link SERIES_POINTS}
 * buckets, each remembering which bucket of time it holds, so an old bucket reads as zero without
 * a timer clearing it. Constant memory per cluster, whatever the request rate.
 */
import { BUCKET_MS, SERIES_POINTS, type TrafficPoint } from "./fleet-types.js";

/** What one request (or a part of a long one) adds to a bucket. */
export interface TrafficDelta {
  requests?: number;
  errors?: number;
  bytesIn?: number;
  bytesOut?: number;
}

/** See the module comment. */
export class TrafficSeries {
  private readonly buckets: TrafficPoint[] = [];

  /** Add `delta` to the bucket of time `now` (Unix ms). */
  add(now: number, delta: TrafficDelta): void {
    const b = this.bucketAt(now);
    b.requests += delta.requests ?? 0;
    b.errors += delta.errors ?? 0;
    b.bytesIn += delta.bytesIn ?? 0;
    b.bytesOut += delta.bytesOut ?? 0;
  }

  /** The {@link SERIES_POINTS} buckets ending with the one of `now`, oldest first. */
  points(now: number): TrafficPoint[] {
    const last = Math.floor(now / BUCKET_MS);
    const out: TrafficPoint[] = [];
    for (let i = last - SERIES_POINTS + 1; i <= last; i++) {
      const b = this.buckets[i % SERIES_POINTS];
      const t = i * BUCKET_MS;
      out.push(b?.t === t ? { ...b } : { t, requests: 0, errors: 0, bytesIn: 0, bytesOut: 0 });
    }
    return out;
  }

  private bucketAt(now: number): TrafficPoint {
    const i = Math.floor(now / BUCKET_MS);
    const t = i * BUCKET_MS;
    const slot = i % SERIES_POINTS;
    let b = this.buckets[slot];
    if (b?.t !== t) {
      b = { t, requests: 0, errors: 0, bytesIn: 0, bytesOut: 0 };
      this.buckets[slot] = b;
    }
    return b;
  }
}
