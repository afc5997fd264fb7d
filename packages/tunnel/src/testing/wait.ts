/** Test-only: bounded waiting for a condition that has no event of its own, and free ports. */
import { once } from "node:events";
import * as net from "node:net";
import { inspect } from "node:util";

/** How long {@link waitUntil} waits and how often it looks. */
export interface WaitOptions {
  /** Give up after this long (default 10 s: generous, tests run on busy machines). */
  timeoutMs?: number;
  /** Look again after this long (default 10 ms). */
  everyMs?: number;
}

/**
 * Re-check `check` until it returns true; throw `timed out after <ms> ms waiting for <what>` once
 * `timeoutMs` has passed. A check that throws counts as "not yet"; its last error is named in the
 * timeout's message.
 */
export async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  { timeoutMs = 10_000, everyMs = 10 }: WaitOptions = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const detail =
        lastError === undefined
          ? ""
          : ` (last: ${lastError instanceof Error ? lastError.message : inspect(lastError)})`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** A port on 127.0.0.1 that was free a moment ago (for options where 0 means "disabled"). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
