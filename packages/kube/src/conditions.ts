/** metav1.Condition bookkeeping: a condition's lastTransitionTime changes only when its status does. */
import type { Condition } from "@cluster-proxy/api";

export type ConditionInput = Omit<Condition, "lastTransitionTime" | "observedGeneration">;

/** Merge `updates` into `existing` (by type), keeping transition times of unchanged statuses. */
export function mergeConditions(
  existing: readonly Condition[] | undefined,
  updates: readonly ConditionInput[],
  generation: number | undefined,
  now: Date,
): Condition[] {
  const byType = new Map((existing ?? []).map((c) => [c.type, c]));
  for (const u of updates) {
    const old = byType.get(u.type);
    byType.set(u.type, {
      ...u,
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      lastTransitionTime:
        old && old.status === u.status ? old.lastTransitionTime : now.toISOString().replace(/\.\d+Z$/, "Z"),
    });
  }
  return [...byType.values()];
}
