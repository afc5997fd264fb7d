/**
 * The stream all connections of a table share, as flow control sees it: whether its peer honours
 * per-connection FLOW_PAUSE, and which connections hold reading from it paused (the fallback for
 * a peer that does not: docs/design/flow-control.md).
 */

/** The operations of a stream the engine uses to hold it (a gRPC call). */
export interface PausableStream {
  pause(): void;
  resume(): void;
  readonly closed: boolean;
}

export class SharedStream {
  /** Connections over their hard limit; reading from the stream is paused while any. */
  private readonly holders = new Set<object>();

  /**
   * @param stream the stream to pause and resume
   * @param ignoresFlowControl the peer is known not to honour FLOW_PAUSE (e.g. it did not announce
   *   it): FLOW packets are not sent to it. Set later by the engine when the peer keeps sending
   *   past a connection's hard limit.
   */
  constructor(
    private readonly stream: PausableStream,
    public ignoresFlowControl = false,
  ) {}

  /** Connections holding the stream paused. */
  get holds(): number {
    return this.holders.size;
  }

  /** Stop reading from the stream until `holder` releases it (and every other holder did). */
  hold(holder: object): void {
    if (this.holders.has(holder)) return;
    if (this.holders.size === 0) this.stream.pause();
    this.holders.add(holder);
  }

  /** `holder` no longer needs the stream paused; the last release resumes it (unless closed). */
  release(holder: object): void {
    if (!this.holders.delete(holder)) return;
    if (this.holders.size === 0 && !this.stream.closed) this.stream.resume();
  }

  /** Forget every hold without resuming (the stream is gone). */
  clear(): void {
    this.holders.clear();
  }
}
