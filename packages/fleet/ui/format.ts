/** How the page writes times, durations and sizes. */

const units: [number, string][] = [
  [86_400_000, "d"],
  [3_600_000, "h"],
  [60_000, "min"],
  [1_000, "s"],
];

/** A span of time in its largest whole unit: "12 d", "3 h", "5 min", "42 s". */
export function span(ms: number): string {
  const abs = Math.abs(ms);
  for (const [size, unit] of units) if (abs >= size) return `${Math.floor(abs / size)} ${unit}`;
  return "0 s";
}

/** A moment relative to `now`: "just now", "5 min ago", "in 12 d". */
export function relative(iso: string, now: number): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "unknown";
  const d = t - now;
  if (Math.abs(d) < 10_000) return "just now";
  return d > 0 ? `in ${span(d)}` : `${span(d)} ago`;
}

/** Certificate expiry under this many ms from now is a warning. */
export const EXPIRY_WARN_MS = 7 * 86_400_000;

/** An agent certificate's expiry relative to now, and whether it calls for attention. */
export function expiry(iso: string | null, now: number): { text: string; warn: boolean } {
  if (iso === null) return { text: "unknown", warn: false };
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return { text: "unknown", warn: false };
  if (t <= now) return { text: `expired ${span(now - t)} ago`, warn: true };
  return { text: `in ${span(t - now)}`, warn: t - now < EXPIRY_WARN_MS };
}

/** A latency in ms: "0.8 ms", "12 ms", "1.2 s"; "—" when unknown. */
export function latency(ms: number | null): string {
  if (ms === null) return "—";
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}

/** A byte count in binary units: "512 B", "1.5 KiB", "3.2 MiB". */
export function bytes(n: number): string {
  const names = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < names.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${names[i] ?? "B"}`;
}

/** A rate per second with at most two decimals. */
export function rate(perSecond: number): string {
  return perSecond >= 100 ? String(Math.round(perSecond)) : String(Math.round(perSecond * 100) / 100);
}
