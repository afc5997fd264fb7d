/**
 * One agent stream (`/AgentService/Connect`) as the server sees it: identity, draining state,
 * the connections established through it, and flow-control bookkeeping in both directions.
 */
import type { AgentIdentifiers } from "@cluster-proxy/protocol";
import type { ServerCall } from "@cluster-proxy/tunnel";
import type { DialFailureReason } from "@cluster-proxy/tunnel";
import type { RoutableBackend } from "./strategies.js";

/** How a dial failed, for the frontend to turn into its own answer (DIAL_RSP or HTTP status). */
export interface DialFailure {
  kind: "no_agent" | "agent_error" | "agent_gone" | "timeout" | "send_failed" | "dial_closed" | "shutdown";
  /** The error text (DIAL_RSP.error). */
  text: string;
  reason: DialFailureReason;
  /** The agent's own packet (DIAL_RSP with error, DIAL_CLS) to forward unchanged, if any. */
  frame?: Buffer;
}

/**
 * The frontend side of tunnelled connections: a gRPC Proxy stream or an HTTP CONNECT socket.
 * The relay calls it with agent packets (as sealed frames, to forward without re-encoding).
 */
export interface FrontendEnd {
  /** The agent accepted the dial; `frame` is its DIAL_RSP. */
  dialSucceeded(random: bigint, conn: TunnelConnection, frame: Buffer): void;
  /** The dial identified by `random` failed. */
  dialFailed(random: bigint, failure: DialFailure): void;
  /**
   * DATA from the agent. Return false when the frontend is over its buffer budget: the relay then
   * stops reading the agent stream until the frontend calls `conn.drained()`.
   */
  data(conn: TunnelConnection, frame: Buffer): boolean;
  /**
   * The connection is over: the agent's CLOSE_RSP `frame`, or undefined when the relay ended it
   * itself, in which case `cut` says why (the agent went away): the frontend should see an error,
   * not a clean end of stream.
   */
  closed(conn: TunnelConnection, frame: Buffer | undefined, cut?: string): void;
}

/** A dial waiting for the agent's DIAL_RSP. */
export interface PendingDial {
  readonly random: bigint;
  readonly backend: Backend;
  readonly end: FrontendEnd;
  readonly address: string;
  readonly startedAt: number;
  timer?: NodeJS.Timeout;
}

/** One connection established through an agent, keyed by (agent stream, connectID). */
export class TunnelConnection {
  /** The frontend is gone and CLOSE_REQ was sent; the entry waits for the agent's CLOSE_RSP. */
  frontendGone = false;

  constructor(
    readonly backend: Backend,
    readonly connectID: bigint,
    readonly end: FrontendEnd,
  ) {}

  /** The frontend drained below its budget: resume reading from the agent. */
  drained(): void {
    this.backend.unstall(this);
  }
}

let nextBackendSerial = 1;

export class Backend implements RoutableBackend {
  draining = false;
  /** Process-unique number of this stream (logs; an agent may hold several streams). */
  readonly serial = nextBackendSerial++;
  /** Established connections by the agent-allocated connectID. */
  readonly connections = new Map<bigint, TunnelConnection>();
  /** Dials sent to this agent and not answered yet. */
  readonly pending = new Set<PendingDial>();
  /** Connections whose frontend is over its buffer budget; reading from the agent is paused while any. */
  private readonly stalledBy = new Set<TunnelConnection>();
  private drainWaiters: (() => void)[] = [];

  constructor(
    readonly agentId: string,
    readonly identifiers: AgentIdentifiers,
    readonly call: ServerCall,
  ) {
    call.on("drain", () => {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    });
  }

  /** Send a sealed frame to the agent. False: the stream's send buffer is full (or it closed). */
  send(frame: Buffer): boolean {
    return this.call.send(frame);
  }

  /** Bytes queued towards the agent. */
  get bufferedBytes(): number {
    return this.call.bufferedBytes;
  }

  get closed(): boolean {
    return this.call.closed;
  }

  /** Run `fn` once the stream's send buffer drains (dropped if the stream closes first). */
  whenDrained(fn: () => void): void {
    this.drainWaiters.push(fn);
  }

  /** Stop reading from the agent until `conn` calls {@link unstall}. */
  stall(conn: TunnelConnection): void {
    if (this.stalledBy.size === 0) this.call.pause();
    this.stalledBy.add(conn);
  }

  unstall(conn: TunnelConnection): void {
    if (!this.stalledBy.delete(conn)) return;
    if (this.stalledBy.size === 0 && !this.call.closed) this.call.resume();
  }

  /** Drop all waiters (the stream is gone). */
  release(): void {
    this.drainWaiters = [];
    this.stalledBy.clear();
  }
}
