/**
 * A frontend for the relay's unit tests that records what happened to its dial (the connection
 * it got, or the failure) and reads nothing.
 */
import type { DialFailure, FrontendEnd, TunnelConnection } from "../agents/backend.js";

export class RecordingEnd implements FrontendEnd {
  conn: TunnelConnection | undefined;
  failure: DialFailure | undefined;
  /** `probe`: the server's own health probe, not a client. */
  constructor(readonly probe = false) {}
  dialSucceeded(_random: bigint, conn: TunnelConnection): void {
    this.conn = conn;
  }
  dialFailed(_random: bigint, failure: DialFailure): void {
    this.failure = failure;
  }
  data(): number {
    return 0;
  }
  delivered(): number {
    return 0;
  }
  buffered(): number {
    return 0;
  }
  pauseSource(): void {}
  stallClose(): void {}
  closed(): void {}
}
