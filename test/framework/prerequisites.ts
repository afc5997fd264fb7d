/** Suites on a machine without their prerequisites: skip with the reason, or fail under `CI=true`. */
/**
 * How a suite treats a machine without its prerequisites (`missing`: why it cannot run, or
 * undefined): skipped with the reason, except under `CI=true`, where a suite that skips would let
 * a build pass that tested nothing. There `skip` is false and the suite's `before` must throw
 * `missing` (see {@link failIfMissing}).
 */
export function prerequisiteSkip(
  missing: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): { skip: string | false; missing?: string } {
  if (missing === undefined) return { skip: false };
  return env.CI === "true" ? { skip: false, missing } : { skip: missing };
}

/** Throw when a suite runs without its prerequisites (under `CI=true`, see {@link prerequisiteSkip}). */
export function failIfMissing(missing: string | undefined): void {
  if (missing !== undefined) throw new Error(`CI=true and this suite's prerequisites are missing: ${missing}`);
}
