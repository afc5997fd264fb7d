// Failure reasons of many operations, summarised for a test's report.
/**
 * Failure reasons grouped for a report: each distinct reason (numbers masked, so ports and
 * timings do not split a group) with its count, most frequent first, one `  3 x reason` line each.
 */
export function groupReasons(reasons: readonly string[]): string {
  const counts = new Map<string, number>();
  // Numbers (ports, ms, connect IDs) would make every reason distinct.
  for (const r of reasons) {
    const key = r.replace(/\d+/g, "N");
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .map(([r, n]) => `  ${n} x ${r}`)
    .join("\n");
}
