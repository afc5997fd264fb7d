/**
 * The switchboard between frontends and agent streams: routing, pending dials (one global map
 * keyed by `random`), established connections (per agent stream, keyed by connectID), and the
 * packet rules of docs/design/protocol.md (sections 2.1, 2.5, 2.6). Packets are relayed as the sealed
 * frames they arrived in; only a DIAL_REQ whose address a suffix match rewrote is re-encoded.
 */
import {
  DialErrors,
  FlowControl,
  PacketDecodeError,
  decodeFlowControl,
  isFlowControlType,
  PacketType,
  decodePacket,
  encodePacket,
  parseHostPort,
  peekDecoded,
  type PacketRoute,
  type Packet,
} from "@cluster-proxy/protocol";
import { ConnectionFlow, FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import { IdleWaiters, realClock, type Clock, type Logger } from "@cluster-proxy/kit";
import type { ProxyStrategy } from "@cluster-proxy/api";
import {
  TunnelConnection,
  type Backend,
  type DialFailure,
  type FlowHooks,
  type FrontendEnd,
  type PendingDial,
} from "../agents/backend.js";
import { TrafficTally } from "./cluster-traffic.js";
import { Router, type RoutableBackend } from "./strategies.js";
import type { ServerDialFailureReason, ServerMetrics } from "../metrics.js";

/** Encode a packet as a sealed gRPC frame. */
export function packetFrame(packet: Packet): Buffer {
  return sealFrame(encodePacket(packet, FRAME_HEADER));
}

/**
 * Read a received frame's routing fields, and give the frame to forward: the received one when
 * its bytes are canonical (the hot path: no copy), else a canonical re-encoding of what was
 * routed, so the next hop cannot read a crafted packet differently (e.g. another connectID).
 * `packet` is the packet as decoded (absent for a canonical DATA, whose payload is not read).
 */
export function routeFrame(frame: Buffer): { route: PacketRoute; frame: Buffer; packet: Packet | undefined } {
  const { route, packet } = peekDecoded(frame.subarray(FRAME_HEADER));
  if (route.canonical || route.type < PacketType.DIAL_REQ || route.type > PacketType.DRAIN || !packet)
    return { route, frame, packet };
  return { route, frame: packetFrame(packet), packet };
}

/** The packet of a routed frame: the one decoded while routing, else decoded now. */
function packetOf(frame: Buffer, packet: Packet | undefined): Packet {
  return packet ?? decodePacket(frame.subarray(FRAME_HEADER));
}

/**
 * The name under which `backend` serves `address`: the host identifier the address's host is or
 * ends with (`mc1` for `mc1:443` and `kubernetes.default.svc.mc1:443`: our agents announce their
 * cluster's name), else the address's host.
 */
export function servedName(backend: RoutableBackend, address: string): string {
  const host = parseHostPort(address)?.host ?? address;
  return backend.identifiers.host.find((h) => host === h || host.endsWith(`.${h}`)) ?? host;
}

/** How many times one dial is sent again after the agent it waited on went away. */
export const MAX_DIAL_RESENDS = 2;

/** How long a connection whose frontend left waits for the agent's CLOSE_RSP before it is forgotten. */
export const CLOSING_LINGER_MS = 30_000;

/**
 * The most dials that wait for an agent at once (a new server's warm-up, {@link RelayOptions.agentWaitMs}):
 * past it a dial for an address no agent serves fails at once, as outside the warm-up, so a flood
 * of dials for made-up clusters holds at most this many (each a small record and a timer).
 */
export const MAX_DIALS_WAITING_FOR_AGENTS = 1024;

/** A dial whose address is longer than this never waits for an agent (no host:port is that long). */
export const MAX_WAITING_ADDRESS_LENGTH = 300;

export interface RelayOptions {
  strategies: readonly ProxyStrategy[];
  /** Fail dials the agent has not answered within this many ms (0: wait forever). */
  backendDialTimeoutMs: number;
  logger: Logger;
  metrics: ServerMetrics;
  /**
   * Close a connection whose reader, while over its buffer budget, read nothing for this many ms
   * (0: never). Default: the tunnel engine's `DEFAULT_CONNECTION_STALL_TIMEOUT_MS`.
   */
  connectionStallTimeoutMs?: number;
  /** Per-connection budget (default: the tunnel engine's `CONNECTION_BUFFER_BUDGET`). */
  connectionBufferBudget?: number;
  /** Per-connection hard limit (default: the tunnel engine's `CONNECTION_BUFFER_LIMIT`). */
  connectionBufferLimit?: number;
  random?: () => number;
  /**
   * How long a dial that finds no agent for its address may wait, from now, for one to connect
   * (a new server's warm-up: --warm-up-dial-wait); never past --backend-dial-timeout. 0 or absent:
   * it fails at once, as the Go server's.
   */
  agentWaitMs?: () => number;
  /** The most dials that wait for an agent at once (default {@link MAX_DIALS_WAITING_FOR_AGENTS}). */
  maxDialsWaitingForAgents?: number;
  /**
   * The clock of the dial deadlines, the closing linger, the stall timers, the idle wait and the
   * dial durations (tests drive it; default the kit's `realClock`).
   */
  clock?: Clock;
}

/** What a frontend asks for when it dials. */
export interface DialOrder {
  address: string;
  random: bigint;
  /** The client's DIAL_REQ frame, forwarded unchanged unless the address is rewritten. */
  frame?: Buffer;
}

export class Relay implements FlowHooks {
  readonly router: Router<Backend>;
  readonly backends = new Set<Backend>();
  /** Per-cluster traffic (cluster-traffic.ts). */
  readonly traffic = new TrafficTally();
  private readonly pending = new Map<bigint, PendingDial>();
  /** The pending dials that wait for an agent of their address to connect (no backend yet). */
  private readonly waiting = new Set<PendingDial>();
  /** When the "room full" warning was logged last (the clock's ms). */
  private waitingFullLoggedAt = -Infinity;
  /** When the first strategy first had an agent to route to (the clock's ms; undefined: not yet). */
  routableSince: number | undefined;
  private established = 0;
  private readonly log: Logger;
  private readonly metrics: ServerMetrics;
  /** The clock of every timer of the relay (and of the frontends that ask it: {@link Relay.clock}). */
  readonly clock: Clock;
  private shuttingDown = false;
  /** Draining (SIGTERM): new dials are refused, the pending and established ones go on. */
  private draining = false;
  private readonly idleWaiters: IdleWaiters;
  /** Per-connection budgets, FLOW_PAUSE / FLOW_RESUME, stall closes and the stream hold. */
  private readonly flow: ConnectionFlow<TunnelConnection>;

  constructor(private readonly options: RelayOptions) {
    this.router = new Router<Backend>(options.strategies, options.random);
    this.log = options.logger;
    this.metrics = options.metrics;
    this.clock = options.clock ?? realClock;
    this.idleWaiters = new IdleWaiters(() => this.idle(), this.clock);
    this.flow = new ConnectionFlow<TunnelConnection>(
      {
        budget: options.connectionBufferBudget,
        limit: options.connectionBufferLimit,
        stallTimeoutMs: options.connectionStallTimeoutMs,
        reader: "client",
        timers: this.clock,
      },
      {
        stream: (conn) => conn.backend.shared,
        sendFlow: (conn, type, frame) => this.sendToAgent(conn.backend, frame, type),
        isOpen: (conn) => !conn.frontendGone && !conn.backend.closed && conn.backend.connections.holds(conn),
        delivered: (conn) => conn.end.delivered(conn),
        buffered: (conn) => conn.end.buffered(conn),
        stalled: (conn, why) => {
          this.log.warn({ agentID: conn.backend.agentId, connectID: conn.connectID }, why);
          this.metrics.connectionStalled();
          conn.end.stallClose(conn, why);
          this.frontendClosed(conn);
        },
        peerIgnoresFlowControl: (conn, buffered) =>
          this.log.info(
            { agentID: conn.backend.agentId, connectID: conn.connectID, buffered },
            "agent ignores per-connection flow control; pausing its stream while a reader is over the limit",
          ),
      },
    );
  }

  pendingCount(): number {
    return this.pending.size;
  }

  establishedCount(): number {
    return this.established;
  }

  /** Dials waiting for an agent of their address to connect. */
  waitingCount(): number {
    return this.waiting.size;
  }

  // ---- agent side -------------------------------------------------------------------------

  addBackend(backend: Backend): void {
    this.backends.add(backend);
    backend.traffic = this.traffic.forHosts(backend.identifiers.host);
    this.router.add(backend);
    if (this.routableSince === undefined && this.router.ready()) this.routableSince = this.clock.now();
    if (this.waiting.size > 0) this.sendWaiting(backend);
  }

  /** `backend` connected: send it (or the agent the router now picks) the dials that waited for it. */
  private sendWaiting(backend: Backend): void {
    let sent = 0;
    for (const dial of [...this.waiting]) {
      const route = this.router.route(dial.requested);
      if (!route || route.backend.closed) continue;
      this.waiting.delete(dial);
      this.clock.clearTimeout(dial.timer);
      dial.timer = undefined;
      this.armDeadline(dial);
      this.sendDial(dial, route.backend, route.address);
      sent++;
    }
    if (sent === 0) return;
    this.metrics.dialsWaitedForAgent.inc({ result: "sent" }, sent);
    this.log.info(
      { agentID: backend.agentId, dials: sent, stillWaiting: this.waiting.size },
      "agent connected: the dials that waited for it are sent",
    );
  }

  /**
   * The agent stream ended: its pending dials go to another agent that serves their address (see
   * {@link resend}), or fail at once; its connections close.
   */
  removeBackend(backend: Backend, why: string): void {
    if (!this.backends.delete(backend)) return;
    this.router.remove(backend);
    backend.release();
    for (const dial of [...backend.pending]) {
      if (!this.resend(dial)) this.failDial(dial, this.agentGone(backend, dial, why));
    }
    for (const conn of [...backend.connections.values()]) {
      this.forgetConnection(conn);
      if (!conn.frontendGone) conn.end.closed(conn, undefined, `agent ${backend.agentId} disconnected: ${why}`);
    }
  }

  private sendToAgent(backend: Backend, frame: Buffer, type: number): boolean {
    this.metrics.packet("to_agent", type);
    return backend.send(frame, type);
  }

  /** A frame from an agent stream. */
  fromAgent(backend: Backend, frame: Buffer): void {
    let route: PacketRoute;
    let packet: Packet | undefined;
    try {
      ({ route, frame, packet } = routeFrame(frame));
    } catch (err) {
      if (!(err instanceof PacketDecodeError)) throw err;
      this.log.warn({ agentID: backend.agentId, err: err.message }, "dropping malformed packet from agent");
      return;
    }
    this.metrics.packet("from_agent", route.type);
    switch (route.type) {
      case PacketType.DIAL_RSP:
        this.onDialResponse(backend, frame, packetOf(frame, packet), route.random, route.connectID);
        return;
      case PacketType.DATA: {
        if (route.connectID === 0n) return;
        const conn = backend.connections.get(route.connectID);
        if (!conn) {
          this.log.debug({ agentID: backend.agentId, connectID: route.connectID }, "DATA for unknown connection");
          this.sendToAgent(
            backend,
            packetFrame({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: route.connectID } }),
            PacketType.CLOSE_REQ,
          );
          return;
        }
        if (conn.frontendGone) return;
        if (!conn.end.probe) for (const t of backend.traffic) t.bytesFromAgent += frame.length;
        this.flow.queued(conn, conn.end.data(conn, frame));
        return;
      }
      case PacketType.CLOSE_RSP: {
        const conn = backend.connections.get(route.connectID);
        if (!conn) return; // answer to a CLOSE_REQ for a connection we already forgot
        this.forgetConnection(conn);
        if (conn.frontendGone) return;
        // A CLOSE_RSP with an error (e.g. our agent's stall close) ends the frontend with an error.
        const p = packetOf(frame, packet);
        const error = "closeResponse" in p ? p.closeResponse.error : "";
        conn.end.closed(conn, frame, error || undefined);
        return;
      }
      case PacketType.DIAL_CLS: {
        const dial = this.pending.get(route.random);
        if (!dial || dial.backend !== backend) return;
        this.failDial(dial, { kind: "dial_closed", text: "dial closed by the agent", reason: "backend_close", frame });
        return;
      }
      case PacketType.DRAIN:
        if (!backend.draining) this.log.info({ agentID: backend.agentId }, "agent is draining");
        backend.draining = true;
        return;
      default:
        if (isFlowControlType(route.type)) {
          this.onFlowControl(backend, frame);
          return;
        }
        this.log.debug({ agentID: backend.agentId, type: route.type }, "ignoring unexpected packet from agent");
    }
  }

  // ---- per-connection flow control (docs/design/flow-control.md) ----------------------------------

  /** FLOW_PAUSE / FLOW_RESUME from our agent: its endpoint is slow, pause this client's source. */
  private onFlowControl(backend: Backend, frame: Buffer): void {
    const flow = decodeFlowControl(frame.subarray(FRAME_HEADER));
    if (!flow) return;
    const conn = backend.connections.get(flow.connectID);
    if (!conn || conn.frontendGone) return;
    conn.end.pauseSource(conn, flow.type === FlowControl.PAUSE);
  }

  /** FlowHooks: the reader of `conn` drained its buffer. */
  drained(conn: TunnelConnection): void {
    this.flow.drained(conn);
  }

  private onDialResponse(backend: Backend, frame: Buffer, p: Packet, random: bigint, connectID: bigint): void {
    const dial = this.pending.get(random);
    if (!dial || dial.backend !== backend) {
      this.metrics.dialFailed("unrecognized_response");
      if (connectID !== 0n) {
        // The frontend gave up (DIAL_CLS / went away): make the agent close the endpoint.
        this.sendToAgent(
          backend,
          packetFrame({ type: PacketType.CLOSE_REQ, closeRequest: { connectID } }),
          PacketType.CLOSE_REQ,
        );
      }
      return;
    }
    this.forgetDial(dial);
    const error = "dialResponse" in p ? p.dialResponse.error : "";
    if (error !== "" || connectID === 0n) {
      this.metrics.dialFailed("error_response");
      if (!dial.end.probe) for (const t of backend.traffic) t.failedDials++;
      dial.end.dialFailed(random, {
        kind: "agent_error",
        text: error || "agent answered the dial without a connection ID",
        reason: "error_response",
        frame,
      });
      return;
    }
    if (backend.connections.has(connectID)) {
      this.log.warn({ agentID: backend.agentId, connectID }, "agent reused a connectID; closing the old connection");
      const old = backend.connections.get(connectID);
      if (old) {
        this.forgetConnection(old);
        if (!old.frontendGone) old.end.closed(old, undefined, `agent ${backend.agentId} reused connectID ${connectID}`);
      }
    }
    const conn = new TunnelConnection(backend, connectID, dial.end, this);
    backend.connections.add(conn);
    this.established++;
    if (!dial.end.probe)
      for (const t of backend.traffic) {
        t.dials++;
        t.openConnections++;
      }
    this.metrics.dialDuration.observe((this.clock.now() - dial.startedAt) / 1000);
    dial.end.dialSucceeded(random, conn, frame);
  }

  // ---- frontend side ----------------------------------------------------------------------

  /**
   * Route and send a dial. On failure the frontend's `dialFailed` is called before this returns
   * and the result is undefined.
   */
  dial(end: FrontendEnd, order: DialOrder): PendingDial | undefined {
    const fail = (kind: DialFailure["kind"], text: string, reason: ServerDialFailureReason): undefined =>
      this.refuse(end, order, { kind, text, reason });
    if (this.shuttingDown) return fail("shutdown", "proxy server is shutting down", "no_agent");
    if (this.draining) return fail("draining", DialErrors.serverDraining, "draining");
    if (this.pending.has(order.random))
      return fail("send_failed", "a dial with this random is already pending", "send_rsp");
    const route = this.router.route(order.address);
    if (!route) {
      return this.waitForAgent(end, order) ?? this.refuse(end, order, this.noAgent(order.address, end.probe === true));
    }
    const backend = route.backend;
    if (backend.closed) {
      if (!end.probe) for (const t of backend.traffic) t.failedDials++;
      return fail("send_failed", `agent ${backend.agentId} stream is closed`, "send_rsp");
    }
    const dial = this.pend(end, order);
    this.armDeadline(dial);
    this.log.debug(
      { address: order.address, forwarded: route.address, agentID: backend.agentId, strategy: route.strategy },
      "dial",
    );
    this.sendDial(dial, backend, route.address, order.frame);
    return dial;
  }

  /** A pending dial for `order`, not yet sent to an agent ({@link sendDial} sends it). */
  private pend(end: FrontendEnd, order: DialOrder): PendingDial {
    const dial: PendingDial = {
      random: order.random,
      backend: undefined,
      end,
      address: order.address,
      requested: order.address,
      resent: 0,
      startedAt: this.clock.now(),
    };
    this.pending.set(order.random, dial);
    return dial;
  }

  /**
   * Arm the dial's deadline (--backend-dial-timeout), counted from when the frontend asked: a
   * dial that waited for an agent has what is left of it.
   */
  private armDeadline(dial: PendingDial): void {
    const deadline = this.options.backendDialTimeoutMs;
    if (deadline <= 0) return;
    const left = Math.max(0, dial.startedAt + deadline - this.clock.now());
    dial.timer = this.clock.setTimeout(() => this.dialTimedOut(dial), left);
  }

  /** Fail a dial before it is pending: count it and tell its frontend. */
  private refuse(end: FrontendEnd, order: DialOrder, failure: DialFailure): undefined {
    this.metrics.dialFailed(failure.reason);
    end.dialFailed(order.random, failure);
    return undefined;
  }

  /**
   * Send `dial` to `backend` as a DIAL_REQ for `address`: the client's own `frame` when the
   * address is the one it asked for, else one encoded here.
   */
  private sendDial(dial: PendingDial, backend: Backend, address: string, frame?: Buffer): void {
    dial.backend = backend;
    dial.address = address;
    backend.pending.add(dial);
    const out =
      frame && address === dial.requested
        ? frame
        : packetFrame({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address, random: dial.random } });
    this.sendToAgent(backend, out, PacketType.DIAL_REQ);
  }

  /**
   * Why a dial for `address` fails when no agent serves it (counted in the address's traffic
   * unless `probe`). A cluster whose agents were connected before (their links went down, e.g.
   * through a hub apiserver that restarts) is named; an address no agent ever served keeps Go's text.
   */
  private noAgent(address: string, probe: boolean): DialFailure {
    const t = probe ? undefined : this.traffic.forAddress(address);
    if (t) t.failedDials++;
    const cluster = this.traffic.identifierOf(address);
    if (cluster === undefined) return { kind: "no_agent", text: DialErrors.noAgent, reason: "no_agent" };
    return {
      kind: "no_agent",
      text: `${DialErrors.noAgent} for cluster ${cluster}: no agent of cluster ${cluster} is connected to this proxy-server now (one was before: its link went down, or it left)`,
      reason: "no_agent",
      cluster,
    };
  }

  /**
   * A new server's warm-up ({@link RelayOptions.agentWaitMs}): keep a dial that found no agent
   * pending until an agent that serves its address connects ({@link sendWaiting}), its wait is
   * over (then it fails as it would have at once), the frontend gives up, or the server drains or
   * stops. Undefined when it may not wait: outside the warm-up, a health probe (it asks about the
   * agents connected now), an address too long to be one, or {@link MAX_DIALS_WAITING_FOR_AGENTS}
   * dials already waiting.
   */
  private waitForAgent(end: FrontendEnd, order: DialOrder): PendingDial | undefined {
    if (end.probe || order.address.length > MAX_WAITING_ADDRESS_LENGTH) return undefined;
    const deadline = this.options.backendDialTimeoutMs;
    const waitMs = Math.min(this.options.agentWaitMs?.() ?? 0, deadline > 0 ? deadline : Infinity);
    if (!(waitMs > 0)) return undefined;
    const cap = this.options.maxDialsWaitingForAgents ?? MAX_DIALS_WAITING_FOR_AGENTS;
    if (this.waiting.size >= cap) {
      this.metrics.dialsWaitedForAgent.inc({ result: "refused" });
      const now = this.clock.now();
      if (now - this.waitingFullLoggedAt >= 10_000) {
        this.waitingFullLoggedAt = now;
        this.log.warn(
          { address: order.address, waiting: this.waiting.size },
          "warm-up: too many dials wait for their agent already; this one fails at once",
        );
      }
      return undefined;
    }
    const dial = this.pend(end, order);
    dial.timer = this.clock.setTimeout(() => this.waitOver(dial), waitMs);
    this.waiting.add(dial);
    this.log.debug(
      { address: order.address, waitMs },
      "warm-up: no agent for this address yet; the dial waits for one",
    );
    return dial;
  }

  /** The wait of `dial` for an agent is over and none came: it fails as it would have at once. */
  private waitOver(dial: PendingDial): void {
    if (!this.waiting.has(dial)) return;
    this.metrics.dialsWaitedForAgent.inc({ result: "expired" });
    this.failDial(dial, this.noAgent(dial.requested, dial.end.probe === true));
  }

  /**
   * Send `dial`, whose agent stream went away before it answered, to another agent the router
   * picks for the same address (another replica of the cluster's agent), under the same deadline
   * and `random`. Safe: an unanswered DIAL_REQ opened nothing the client could have used, and a
   * late answer of the old stream is never read (its stream is gone; {@link onDialResponse}
   * checks the stream). At most {@link MAX_DIAL_RESENDS} times; never a health probe (it asks
   * about that agent). False when it was not sent again.
   */
  private resend(dial: PendingDial): boolean {
    if (dial.end.probe || dial.resent >= MAX_DIAL_RESENDS || this.shuttingDown) return false;
    const route = this.router.route(dial.requested);
    if (!route || route.backend.closed) return false;
    dial.backend?.pending.delete(dial);
    dial.backend = route.backend;
    dial.address = route.address;
    dial.resent++;
    route.backend.pending.add(dial);
    this.metrics.dialsResent.inc();
    this.log.info(
      { address: dial.requested, forwarded: route.address, agentID: route.backend.agentId, resent: dial.resent },
      "dial sent again: its agent went away before answering",
    );
    this.sendToAgent(
      route.backend,
      packetFrame({
        type: PacketType.DIAL_REQ,
        dialRequest: { protocol: "tcp", address: route.address, random: dial.random },
      }),
      PacketType.DIAL_REQ,
    );
    return true;
  }

  /**
   * Why `dial` failed when its agent stream ended before answering and it was not sent again: the
   * text names the cluster (the agent's host identifier that serves the address) and says whether
   * any agent of it is still connected to this proxy-server: with entrypoint PortForward, an
   * apiserver outage takes every agent's link down at once, and the client should read that
   * instead of a bare "backend" error.
   */
  private agentGone(backend: Backend, dial: PendingDial, why: string): DialFailure {
    const cluster = servedName(backend, dial.requested);
    const text = this.router.route(dial.requested)
      ? `agent ${backend.agentId} of cluster ${cluster} disconnected before answering the dial (${why})${dial.resent > 0 ? `, after it was sent ${dial.resent} time(s) again` : ""}`
      : `no agent of cluster ${cluster} is connected: the link of agent ${backend.agentId} went down before it answered the dial (${why})`;
    return { kind: "agent_gone", text, reason: "agent_gone", cluster };
  }

  private dialTimedOut(dial: PendingDial): void {
    if (this.pending.get(dial.random) !== dial || !dial.backend) return;
    this.sendToAgent(
      dial.backend,
      packetFrame({ type: PacketType.DIAL_CLS, closeDial: { random: dial.random } }),
      PacketType.DIAL_CLS,
    );
    this.failDial(dial, { kind: "timeout", text: DialErrors.backendDialTimeout, reason: "backend_dial_timeout" });
  }

  /**
   * The frontend gave up on a pending dial (DIAL_CLS or went away). Tells the agent with DIAL_CLS
   * (the Go agent ignores it; its late DIAL_RSP is answered with CLOSE_REQ).
   */
  cancelDial(dial: PendingDial): void {
    if (this.pending.get(dial.random) !== dial) return;
    if (this.waiting.has(dial)) this.metrics.dialsWaitedForAgent.inc({ result: "cancelled" });
    this.forgetDial(dial);
    this.metrics.dialFailed("frontend_close");
    if (dial.backend && !dial.backend.closed) {
      this.sendToAgent(
        dial.backend,
        packetFrame({ type: PacketType.DIAL_CLS, closeDial: { random: dial.random } }),
        PacketType.DIAL_CLS,
      );
    }
  }

  /**
   * Forward a frontend frame (DATA, CLOSE_REQ) for `conn` to its agent. Returns false when the
   * agent stream's buffer is over `budget` bytes: the caller pauses its source until
   * `conn.backend.whenDrained` fires.
   */
  toAgent(conn: TunnelConnection, frame: Buffer, type: number, budget: number): boolean {
    if (type === PacketType.DATA && !conn.end.probe)
      for (const t of conn.backend.traffic) t.bytesToAgent += frame.length;
    const ok = this.sendToAgent(conn.backend, frame, type);
    return ok || conn.backend.bufferedBytes <= budget;
  }

  /**
   * The frontend of an established connection closed (client CLOSE_REQ already forwarded, or
   * the client went away): send CLOSE_REQ unless `alreadySent`, and wait for the agent's
   * CLOSE_RSP without delivering anything more to the frontend.
   */
  frontendClosed(conn: TunnelConnection, alreadySent = false): void {
    if (conn.frontendGone) return;
    conn.frontendGone = true;
    this.flow.release(conn);
    if (!conn.backend.connections.holds(conn)) return;
    if (!alreadySent && !conn.backend.closed) {
      this.sendToAgent(
        conn.backend,
        packetFrame({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: conn.connectID } }),
        PacketType.CLOSE_REQ,
      );
    }
    this.clock.setTimeout(() => this.forgetConnection(conn), CLOSING_LINGER_MS);
  }

  // ---- bookkeeping ------------------------------------------------------------------------

  /** Forget a pending dial, count its failure and tell its frontend. */
  private failDial(dial: PendingDial, failure: DialFailure): void {
    this.forgetDial(dial);
    // A dial that waited for an agent was counted by noAgent(), or not at all (drain, shutdown).
    if (failure.kind !== "shutdown" && !dial.end.probe && dial.backend)
      for (const t of dial.backend.traffic) t.failedDials++;
    this.metrics.dialFailed(failure.reason);
    dial.end.dialFailed(dial.random, failure);
  }

  private forgetDial(dial: PendingDial): void {
    if (dial.timer !== undefined) this.clock.clearTimeout(dial.timer);
    if (this.pending.get(dial.random) === dial) this.pending.delete(dial.random);
    dial.backend?.pending.delete(dial);
    this.waiting.delete(dial);
    this.idleWaiters.notify();
  }

  private forgetConnection(conn: TunnelConnection): void {
    if (!conn.backend.connections.remove(conn)) return;
    this.flow.release(conn);
    this.established--;
    if (!conn.end.probe) for (const t of conn.backend.traffic) t.openConnections--;
    this.idleWaiters.notify();
  }

  /** No dial pending and no connection established. */
  idle(): boolean {
    return this.established === 0 && this.pending.size === 0;
  }

  /**
   * Resolve true once no dial is pending and no connection is established, or false after
   * `timeoutMs`.
   */
  whenIdle(timeoutMs: number): Promise<boolean> {
    return this.idleWaiters.wait(timeoutMs);
  }

  /**
   * Drain: refuse new dials ({@link DialErrors.serverDraining}); pending and open ones go on, but
   * the dials that wait for an agent fail at once ({@link releaseWaiting}).
   */
  startDraining(): void {
    this.draining = true;
    this.releaseWaiting();
  }

  /**
   * The server is leaving: every dial that waits for an agent fails at once as draining (the
   * client dials again, through another replica), and no new dial waits (`agentWaitMs` says 0).
   */
  releaseWaiting(): void {
    if (this.waiting.size === 0) return;
    this.metrics.dialsWaitedForAgent.inc({ result: "released" }, this.waiting.size);
    for (const dial of [...this.waiting])
      this.failDial(dial, { kind: "draining", text: DialErrors.serverDraining, reason: "draining" });
  }

  /** Shutdown: refuse new dials and fail every pending one (those that wait for an agent too). */
  stopDialing(): void {
    this.shuttingDown = true;
    if (this.waiting.size > 0) this.metrics.dialsWaitedForAgent.inc({ result: "released" }, this.waiting.size);
    for (const dial of [...this.pending.values()]) {
      this.failDial(dial, { kind: "shutdown", text: "proxy server is shutting down", reason: "frontend_close" });
    }
  }
}
