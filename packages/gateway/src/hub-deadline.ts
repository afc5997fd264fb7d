/**
 * One deadline for all the hub reviews of one request (its TokenReview, then each
 * SubjectAccessReview of impersonation and cluster access): a hub apiserver that accepts
 * connections but answers slowly (starting, overloaded) makes the request fail with 503 at this
 * deadline, not at the sum of each review's own timeout.
 * Design: docs/design/gateway.md#who-authenticates-and-authorizes-what-where
 */

/**
 * How long the hub reviews of one request may take in all, and each hub review call at most (a
 * review shared by several requests, `kube-hub.ts`).
 */
export const HUB_REVIEW_TIMEOUT_MS = 5_000;

/** The deadline of one request's hub reviews, counted from its creation. */
export class HubDeadline {
  private readonly at: number;

  constructor(
    readonly ms: number = HUB_REVIEW_TIMEOUT_MS,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.at = now() + ms;
  }

  /** `review`, or a rejection naming `what` when the deadline passes first (at once when it has). */
  race<T>(review: Promise<T>, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `the hub apiserver did not answer the ${what} within ${this.ms} ms (the deadline of all the hub reviews of a request)`,
            ),
          ),
        Math.max(0, this.at - this.now()),
      );
    });
    return Promise.race([review, late]).finally(() => clearTimeout(timer));
  }
}
