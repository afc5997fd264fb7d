/**
 * The abort signal of a hub call that several requests share (a TokenReview, SubjectAccessReview or
 * ManagedCluster lookup coalesced by key): it aborts when every request waiting for the call has
 * given up (its deadline passed), so that the call's HTTP request to the hub is closed then, and
 * never while one request still waits (nor when one joined without a signal).
 */
export class SharedAbort {
  private readonly controller = new AbortController();
  /** Waiters whose signal has not aborted. */
  private waiting = 0;
  /** A waiter without a signal joined: the call is never aborted. */
  private held = false;

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** One more request waits for the call, until `signal` aborts (undefined: for as long as it takes). */
  join(signal: AbortSignal | undefined): void {
    if (!signal) this.held = true;
    else if (!signal.aborted) {
      this.waiting++;
      signal.addEventListener(
        "abort",
        () => {
          this.waiting--;
          this.check(signal.reason);
        },
        { once: true },
      );
    }
    this.check(signal?.reason);
  }

  private check(reason: unknown): void {
    if (!this.held && this.waiting === 0 && !this.controller.signal.aborted) this.controller.abort(reason);
  }
}

/**
 * Hub calls shared by key: one call per key at a time, which every request asking for that key
 * while it runs joins; its signal aborts as {@link SharedAbort} says, and it is forgotten once settled.
 */
export class SharedCalls<V> {
  private readonly running = new Map<string, { call: Promise<V>; waiters: SharedAbort }>();

  /**
   * The call under way for `key`, now also waited for until `signal` aborts; undefined when none
   * runs, or when the one that runs was aborted (every request waiting for it gave up) and has not
   * settled yet: a request asking then must not fail for the others' deadlines.
   */
  join(key: string, signal: AbortSignal | undefined): Promise<V> | undefined {
    const running = this.running.get(key);
    if (!running || running.waiters.signal.aborted) return undefined;
    running.waiters.join(signal);
    return running.call;
  }

  /** Start the call for `key` (none runs: {@link join} said so), waited for until `signal` aborts. */
  start(key: string, signal: AbortSignal | undefined, call: (signal: AbortSignal) => Promise<V>): Promise<V> {
    const waiters = new SharedAbort();
    waiters.join(signal);
    const p = call(waiters.signal);
    this.running.set(key, { call: p, waiters });
    // An aborted call may settle after another was started for its key: it forgets only itself.
    const forget = (): void => {
      if (this.running.get(key)?.call === p) this.running.delete(key);
    };
    p.then(forget, forget);
    return p;
  }
}
