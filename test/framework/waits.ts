/** Bounded waits for a condition: polls with a deadline, never a bare sleep. */
import { waitUntil } from "@cluster-proxy/tunnel/testing";

/**
 * Poll `check` every `everyMs` until it returns true; bounded by `timeoutMs` (the tunnel's
 * {@link waitUntil} with the suites' defaults: a check that throws is "not yet").
 */
export function waitFor(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<void> {
  return waitUntil(what, check, { timeoutMs, everyMs });
}
