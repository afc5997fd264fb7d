/**
 * The one hash the manager uses to tell whether something it renders changed: 16 hex digits of
 * SHA-256 over a string as it is, or over any other value as JSON with object keys sorted (so the
 * order fields were written in never counts). OCM's own spec hash, which a Go manager must agree
 * with, is {@link specHash} in agent-manifests.ts; certificates have `leafRequestHash`.
 */
import { createHash } from "node:crypto";

function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === "object")
    return Object.fromEntries(
      Object.entries(v)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, x]) => [k, canonical(x)]),
    );
  return v;
}

/** 16 hex digits of SHA-256 over `value` (a string as it is; anything else as canonical JSON). */
export function contentHash(value: unknown): string {
  const text = typeof value === "string" ? value : JSON.stringify(canonical(value));
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}
