/**
 * Per-connection flow control towards a slow reader, the same at both ends of a tunnel: the budget
 * and FLOW_PAUSE / FLOW_RESUME, the stall timeout, the hard limit that holds the shared stream.
 * Design: docs/design/flow-control.md#rules
 */
import { FlowControl, encodeFlowControl } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "../grpc/framing.js";
import type { SharedStream } from "./shared-stream.js";
import { realClock, type TimerHandle, type Timers } from "@cluster-proxy/kit";

/**
 * Bytes one connection may have buffered towards its reader before the peer is asked (FLOW_PAUSE)
 * to stop reading that connection's source, and the stall clock starts.
 */
export const CONNECTION_BUFFER_BUDGET = 4 * 1024 * 1024;

/**
 * Bytes one connection may buffer before the shared stream is held for it. Reached only when the
 * peer ignores FLOW_PAUSE (Go): ours stops within one HTTP/2 window (16 MiB) plus its own send
 * buffers after the budget, well under this.
 */
export const CONNECTION_BUFFER_LIMIT = 64 * 1024 * 1024;

/** Default `--connection-stall-timeout`. */
export const DEFAULT_CONNECTION_STALL_TIMEOUT_MS = 60_000;

/** The error text of a connection closed because its reader (`who`: client, endpoint) stalled. */
export function stallErrorText(who: string, timeoutMs: number, buffered: number): string {
  return (
    `connection stalled: the ${who} read nothing for ${timeoutMs / 1000}s with ${buffered} bytes ` +
    `buffered (--connection-stall-timeout)`
  );
}

/** The flow-control state of one connection (owned by {@link ConnectionFlow}; read it, do not set it). */
export class FlowState {
  /** Over budget: FLOW_PAUSE was sent (or would have been) and FLOW_RESUME is owed. */
  peerPaused = false;
  /** Over the hard limit: the shared stream is held for this connection. */
  holding = false;
  /** Armed while over budget; fires the stall check. */
  stallTimer: TimerHandle = undefined;
  /** What the reader had taken (`delivered`) when the stall timer was (re)armed. */
  stallMark = 0;
}

/** A connection the engine controls. */
export interface FlowControlled {
  readonly connectID: bigint;
  readonly flow: FlowState;
}

/** What one end of the tunnel provides for its connections. */
export interface FlowEnd<C extends FlowControlled> {
  /** The stream `conn` shares with the other connections of its table. */
  stream(conn: C): SharedStream;
  /** Send a sealed FLOW_PAUSE / FLOW_RESUME `frame` for `conn` on its stream. */
  sendFlow(conn: C, type: FlowControl, frame: Buffer): void;
  /** `conn` is still open towards its reader and in its table (only such are owed FLOW_RESUME or stall checks). */
  isOpen(conn: C): boolean;
  /** Bytes the reader has taken from `conn` so far (monotonic). */
  delivered(conn: C): number;
  /** Bytes `conn` has buffered towards its reader now. */
  buffered(conn: C): number;
  /** The reader stalled: close `conn` with the error `why`. */
  stalled(conn: C, why: string): void;
  /** The peer went past `conn`'s hard limit: it ignores FLOW_PAUSE (called once per stream, to log). */
  peerIgnoresFlowControl(conn: C, buffered: number): void;
}

export interface ConnectionFlowOptions {
  /** Per-connection budget (default {@link CONNECTION_BUFFER_BUDGET}). */
  budget?: number;
  /** Per-connection hard limit (default {@link CONNECTION_BUFFER_LIMIT}; at least the budget). */
  limit?: number;
  /** Close a reader that read nothing for this many ms while over budget (0: never; default {@link DEFAULT_CONNECTION_STALL_TIMEOUT_MS}). */
  stallTimeoutMs?: number;
  /** Who reads (the stall error names it): "client" or "endpoint". */
  reader: string;
  /** Default: Node's timers. */
  timers?: Timers;
}

/** The flow-control policy of one end of the tunnel, for all its connections and streams. */
export class ConnectionFlow<C extends FlowControlled> {
  readonly budget: number;
  readonly limit: number;
  readonly stallTimeoutMs: number;
  private readonly reader: string;
  private readonly timers: Timers;

  constructor(
    options: ConnectionFlowOptions,
    private readonly end: FlowEnd<C>,
  ) {
    this.budget = options.budget ?? CONNECTION_BUFFER_BUDGET;
    this.limit = Math.max(this.budget, options.limit ?? CONNECTION_BUFFER_LIMIT);
    this.stallTimeoutMs = options.stallTimeoutMs ?? DEFAULT_CONNECTION_STALL_TIMEOUT_MS;
    this.reader = options.reader;
    this.timers = options.timers ?? realClock;
  }

  /** `conn` now has `buffered` bytes towards its reader (call after each write to the reader). */
  queued(conn: C, buffered: number): void {
    if (buffered > this.budget) this.overBudget(conn, buffered);
  }

  private overBudget(conn: C, buffered: number): void {
    const flow = conn.flow;
    const stream = this.end.stream(conn);
    if (!flow.peerPaused) {
      flow.peerPaused = true;
      this.sendFlow(conn, stream, FlowControl.PAUSE);
      this.armStallTimer(conn);
    }
    if (buffered > this.limit && !flow.holding) {
      // The peer kept sending past the budget plus everything that can be in flight: it does not
      // know FLOW_PAUSE. Hold the shared stream until this reader drains (bounded by the stall timeout).
      flow.holding = true;
      if (!stream.ignoresFlowControl) {
        stream.ignoresFlowControl = true;
        this.end.peerIgnoresFlowControl(conn, buffered);
      }
      stream.hold(conn);
    }
  }

  /** The reader of `conn` drained its buffer: end any pause or hold it caused. */
  drained(conn: C): void {
    const flow = conn.flow;
    this.clearStallTimer(flow);
    if (flow.peerPaused) {
      flow.peerPaused = false;
      if (this.end.isOpen(conn)) this.sendFlow(conn, this.end.stream(conn), FlowControl.RESUME);
    }
    if (flow.holding) {
      flow.holding = false;
      this.end.stream(conn).release(conn);
    }
  }

  /** `conn` is over or its reader is gone: no stall timer, no hold, no FLOW_RESUME owed. */
  release(conn: C): void {
    const flow = conn.flow;
    this.clearStallTimer(flow);
    flow.peerPaused = false;
    flow.holding = false;
    this.end.stream(conn).release(conn);
  }

  private sendFlow(conn: C, stream: SharedStream, type: FlowControl): void {
    if (stream.ignoresFlowControl) return;
    this.end.sendFlow(conn, type, sealFrame(encodeFlowControl(type, conn.connectID, FRAME_HEADER)));
  }

  private armStallTimer(conn: C): void {
    if (this.stallTimeoutMs <= 0) return;
    this.clearStallTimer(conn.flow);
    conn.flow.stallMark = this.end.delivered(conn);
    conn.flow.stallTimer = this.timers.setTimeout(() => this.stallCheck(conn), this.stallTimeoutMs);
  }

  private clearStallTimer(flow: FlowState): void {
    if (flow.stallTimer !== undefined) this.timers.clearTimeout(flow.stallTimer);
    flow.stallTimer = undefined;
  }

  /** The stall timer fired: close the connection unless its reader made progress meanwhile. */
  private stallCheck(conn: C): void {
    conn.flow.stallTimer = undefined;
    if (!conn.flow.peerPaused || !this.end.isOpen(conn)) return;
    if (this.end.delivered(conn) > conn.flow.stallMark) {
      this.armStallTimer(conn); // slow, not stalled
      return;
    }
    this.end.stalled(conn, stallErrorText(this.reader, this.stallTimeoutMs, this.end.buffered(conn)));
  }
}
