/**
 * One deadline for all the hub reviews of one request (its TokenReview, then each
 * SubjectAccessReview of impersonation and cluster access): a hub apiserver that accepts
 * connections but answers slowly (starting, overloaded) makes the request fail with 503 at this
 * deadline, not at the sum of each review's own timeout.
 * Design: docs/design/gateway.md#who-authenticates-and-authorizes-what-where
 */
import { realClock, type TimerHandle, type Timers } from "@cluster-proxy/kit";

/**
 * How long the hub reviews of one request may take in all, and each hub review call at most (a
 * review shared by several requests, `kube-hub.ts`).
 */
export const HUB_REVIEW_TIMEOUT_MS = 5_000;

/** What {@link HubDeadline}'s timer resolves with: no review answers with it. */
const PASSED: unique symbol = Symbol("hub deadline passed");

/**
 * The deadline of one request's hub reviews, counted from its creation by one timer (the monotonic
 * clock of timers: a wall clock that steps back or stands still does not lengthen it), `timers`'
 * (default the kit's `realClock`, whose timers do not keep the process alive). The timer is gone
 * once it fired or {@link done} was called. Its signal and the promise reviews race are made on
 * first use: a request whose hub answers are all cached (the common case) makes neither.
 */
export class HubDeadline {
  private readonly timer: TimerHandle;
  private expired = false;
  private passed: Promise<typeof PASSED> | undefined;
  private markPassed: ((p: typeof PASSED) => void) | undefined;
  private expiry: AbortController | undefined;

  constructor(
    readonly ms: number = HUB_REVIEW_TIMEOUT_MS,
    private readonly timers: Timers = realClock,
  ) {
    this.timer = timers.setTimeout(() => this.expire(), ms);
  }

  private expire(): void {
    this.expired = true;
    this.markPassed?.(PASSED);
    this.expiry?.abort(this.reason());
  }

  private reason(): Error {
    return new Error(`the deadline of all the hub reviews of a request (${this.ms} ms) passed`);
  }

  /**
   * Aborts when the deadline passes: the hub calls made for this request alone close their HTTP
   * requests then (a call shared with other requests when all of them gave up, `shared-abort.ts`).
   */
  get signal(): AbortSignal {
    if (!this.expiry) {
      this.expiry = new AbortController();
      if (this.expired) this.expiry.abort(this.reason());
    }
    return this.expiry.signal;
  }

  /** `review`, or a rejection naming `what` when the deadline passes first (at once when it has). */
  async race<T>(review: Promise<T>, what: string): Promise<T> {
    this.passed ??= this.expired
      ? Promise.resolve(PASSED)
      : new Promise((resolve) => {
          this.markPassed = resolve;
        });
    const first = await Promise.race([review, this.passed]);
    if (first === PASSED)
      throw new Error(
        `the hub apiserver did not answer the ${what} within ${this.ms} ms (the deadline of all the hub reviews of a request)`,
      );
    return first;
  }

  /**
   * The request waits for no more hub reviews: the timer goes, and the signal (when one was
   * asked for) aborts, so a review only this request was waiting for is given up.
   */
  done(): void {
    this.timers.clearTimeout(this.timer);
    if (!this.expired && this.expiry && !this.expiry.signal.aborted)
      this.expiry.abort(new Error("the request waits for no more hub reviews"));
  }
}
