/** The two limits every dial has, a deadline and an AbortSignal, and the errors they produce. */
import { keepAliveClock, type Clock } from "@cluster-proxy/kit";
import { DialError } from "@cluster-proxy/tunnel";

/** The error of a dial that ran out of time (reason `timeout`). */
export function dialTimeoutError(address: string, timeoutMs: number): DialError {
  return new DialError(`dial to ${address} timed out after ${timeoutMs} ms`, "timeout");
}

/** The error of a dial cancelled through its AbortSignal (reason `context`). */
export function dialAbortError(address: string, signal: AbortSignal | undefined): DialError {
  const reason: unknown = signal?.reason;
  const why =
    reason instanceof Error ? reason.message : typeof reason === "string" && reason !== "" ? reason : "aborted";
  return new DialError(`dial to ${address} aborted: ${why}`, "context", { cause: reason });
}

/** A dial's limits: its address (for messages), when it must be done, and its signal. */
export interface DialLimits {
  address: string;
  timeoutMs: number;
  /** `clock.now()` value after which the dial has failed. */
  deadline: number;
  signal?: AbortSignal | undefined;
  /** The clock of the deadline and its timers. */
  clock: Clock;
}

/**
 * Start the clock of a dial, on `clock` (default the kit's `keepAliveClock`: the wait for a dial
 * keeps the process alive).
 */
export function startDialLimits(
  address: string,
  timeoutMs: number,
  signal?: AbortSignal,
  clock: Clock = keepAliveClock,
): DialLimits {
  return { address, timeoutMs, deadline: clock.now() + timeoutMs, signal, clock };
}

/** Milliseconds left before the deadline (never negative). */
export function remainingMs(limits: DialLimits): number {
  return Math.max(0, limits.deadline - limits.clock.now());
}

/**
 * Wait for `work` within the dial's limits. If the limits win, the promise rejects and
 * `discard` receives the value `work` resolves with later (to close it).
 */
export function withinDialLimits<T>(work: Promise<T>, limits: DialLimits, discard: (value: T) => void): Promise<T> {
  const { signal, clock } = limits;
  if (signal?.aborted) {
    work.then(discard, () => undefined);
    return Promise.reject(dialAbortError(limits.address, signal));
  }
  return new Promise<T>((resolve, reject) => {
    let done = false;
    const finish = (): boolean => {
      if (done) return false;
      done = true;
      clock.clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      return true;
    };
    const onAbort = (): void => {
      if (finish()) reject(dialAbortError(limits.address, signal));
    };
    const timer = clock.setTimeout(() => {
      if (finish()) reject(dialTimeoutError(limits.address, limits.timeoutMs));
    }, remainingMs(limits));
    signal?.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        if (finish()) resolve(value);
        else discard(value);
      },
      (err: unknown) => {
        if (finish()) reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
