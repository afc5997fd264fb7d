/**
 * One agent stream (`/AgentService/Connect`) as the server sees it: identity, draining state,
 * the connections established through it, and flow-control bookkeeping in both directions.
 */
import { PacketType, type AgentIdentifiers } from "@cluster-proxy/protocol";
import { ConnectionTable, FlowState, SharedStream, type ServerCall } from "@cluster-proxy/tunnel";
import type { TimerHandle } from "@cluster-proxy/kit";
import type { IdentifierTraffic } from "../routing/cluster-traffic.js";
import type { ServerDialFailureReason } from "../metrics.js";
import type { RoutableBackend } from "../routing/strategies.js";

/** How a dial failed, for the frontend to turn into its own answer (DIAL_RSP or HTTP status). */
export interface DialFailure {
  kind: "no_agent" | "agent_error" | "agent_gone" | "timeout" | "send_failed" | "dial_closed" | "shutdown" | "draining";
  /** The error text (DIAL_RSP.error). */
  text: string;
  reason: ServerDialFailureReason;
  /** The agent's own packet (DIAL_RSP with error, DIAL_CLS) to forward unchanged, if any. */
  frame?: Buffer;
  /** The cluster the dial was for, when the relay knows it (an `agent_gone` failure). */
  cluster?: string;
}

/**
 * The frontend side of tunnelled connections: a gRPC Proxy stream or an HTTP CONNECT socket.
 * The relay calls it with agent packets (as sealed frames, to forward without re-encoding).
 */
export interface FrontendEnd {
  /**
   * The server's own probe (`ProxyServer.probe`), not a client: its dials and connections
   * are not counted in the per-cluster traffic.
   */
  readonly probe?: boolean;
  /** The agent accepted the dial; `frame` is its DIAL_RSP. */
  dialSucceeded(random: bigint, conn: TunnelConnection, frame: Buffer): void;
  /** The dial identified by `random` failed. */
  dialFailed(random: bigint, failure: DialFailure): void;
  /**
   * DATA from the agent. Returns the bytes this connection now has buffered towards its reader.
   * Over the per-connection budget the relay applies the flow-control policy
   * (docs/design/flow-control.md); the frontend calls `conn.drained()` once its buffer is empty.
   */
  data(conn: TunnelConnection, frame: Buffer): number;
  /**
   * Bytes that have left this connection's buffer towards the reader so far (monotonic): the
   * stall check compares it over time.
   */
  delivered(conn: TunnelConnection): number;
  /** Bytes this connection has buffered towards its reader now. */
  buffered(conn: TunnelConnection): number;
  /** The agent asked (FLOW_PAUSE / FLOW_RESUME) to stop or resume reading this connection's source. */
  pauseSource(conn: TunnelConnection, paused: boolean): void;
  /**
   * The reader stopped reading for longer than the stall timeout: drop what is buffered and end
   * the reader's side at once with an error naming `why` (the agent is told with CLOSE_REQ).
   */
  stallClose(conn: TunnelConnection, why: string): void;
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
  /**
   * The agent stream the dial was sent on (another one when that went away before answering);
   * undefined while it waits for an agent of its address to connect (a new server's warm-up,
   * see the relay's `agentWaitMs`).
   */
  backend: Backend | undefined;
  readonly end: FrontendEnd;
  /** The address sent to {@link backend} (the requested one, rewritten by a suffix match). */
  address: string;
  /** The address the frontend asked for. */
  readonly requested: string;
  /** How many times the dial was sent again after its agent went away. */
  resent: number;
  readonly startedAt: number;
  /** The dial deadline, or the end of its wait for an agent (a handle of the relay's clock). */
  timer?: TimerHandle;
}

/** What a connection calls back into when its reader drains (the relay's flow-control policy). */
export interface FlowHooks {
  drained(conn: TunnelConnection): void;
}

/** One connection established through an agent, keyed by (agent stream, connectID). */
export class TunnelConnection {
  /** The frontend is gone and CLOSE_REQ was sent; the entry waits for the agent's CLOSE_RSP. */
  frontendGone = false;
  /** Flow control towards the frontend's reader (the engine's ConnectionFlow owns it). */
  readonly flow = new FlowState();

  constructor(
    readonly backend: Backend,
    readonly connectID: bigint,
    readonly end: FrontendEnd,
    private readonly hooks?: FlowHooks,
  ) {}

  /** The frontend's buffer drained: end any pause or hold this connection caused. */
  drained(): void {
    if (this.hooks) this.hooks.drained(this);
    else this.backend.shared.release(this);
  }
}

let nextBackendSerial = 1;

export class Backend implements RoutableBackend {
  draining = false;
  /** Process-unique number of this stream (logs; an agent may hold several streams). */
  readonly serial = nextBackendSerial++;
  /** Established connections by the agent-allocated connectID. */
  readonly connections = new ConnectionTable<TunnelConnection>();
  /** Dials sent to this agent and not answered yet. */
  readonly pending = new Set<PendingDial>();
  /** The traffic counters of this stream's `host` identifiers (the relay sets them when it connects). */
  traffic: readonly IdentifierTraffic[] = [];
  /**
   * The stream as flow control sees it: reading from the agent is held while a connection is over
   * the hard per-connection limit and the agent ignores FLOW_PAUSE (a Go agent).
   */
  readonly shared: SharedStream;
  private drainWaiters: (() => void)[] = [];

  constructor(
    readonly agentId: string,
    readonly identifiers: AgentIdentifiers,
    readonly call: ServerCall,
  ) {
    this.shared = new SharedStream(call);
    call.on("drain", () => {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    });
  }

  /**
   * Send a sealed frame to the agent: DATA as data, any other `type` as a control frame (bounded,
   * see the tunnel's SendLimits). False: the stream's send buffer is full (or it closed).
   */
  send(frame: Buffer, type: number): boolean {
    return type === PacketType.DATA ? this.call.send(frame) : this.call.sendControl(frame);
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

  /** Whether the agent ignores FLOW_PAUSE (it did not announce flow control, or kept sending past a limit). */
  get ignoresFlowControl(): boolean {
    return this.shared.ignoresFlowControl;
  }

  set ignoresFlowControl(ignores: boolean) {
    this.shared.ignoresFlowControl = ignores;
  }

  /** Drop all waiters (the stream is gone). */
  release(): void {
    this.drainWaiters = [];
    this.shared.clear();
  }
}
