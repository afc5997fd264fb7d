/**
 * One agent tunnel: the `/AgentService/Connect` stream to one proxy server (on its own HTTP/2
 * session) and the endpoint connections opened through it. Handles DIAL_REQ, DATA, CLOSE_REQ
 * and DIAL_CLS from the server and answers as the Go proxy-agent does.
 *
 * Backpressure (docs/flow-control.md): all connections of a tunnel share this one stream, so it is
 * never paused for one connection. When the stream's send buffer holds more than
 * {@link STREAM_SEND_BUDGET}, every endpoint socket reading into it is paused until "drain"; while
 * the stream is backed up, each busy endpoint reads one quantum per turn between drains, least
 * recently served first ({@link ENDPOINT_SEND_QUANTUM}): a round robin. When one endpoint
 * socket's write buffer exceeds {@link ENDPOINT_WRITE_BUDGET}, the server is asked (FLOW_PAUSE)
 * to stop reading that connection's client and the stall clock starts; an endpoint that reads
 * nothing for the stall timeout is closed with an error. Only when the server ignores FLOW_PAUSE
 * (the Go server) and the socket's buffer passes {@link ENDPOINT_WRITE_LIMIT} is the stream paused
 * until it drains. A FLOW_PAUSE from the server pauses reading that one endpoint socket.
 */
import { EventEmitter } from "node:events";
import type * as http2 from "node:http2";
import type * as net from "node:net";
import {
  DialErrors,
  FlowControl,
  PacketType,
  decodeFlowControl,
  encodeFlowControl,
  decodePacket,
  MAX_DATA_CHUNK,
  type DialRequest,
  type Packet,
} from "@cluster-proxy/protocol";
import {
  FRAME_HEADER,
  grpcCodeName,
  sealFrame,
  sendData,
  sendPacket,
  type ClientCall,
  type Logger,
} from "@cluster-proxy/tunnel";
import {
  dialEndpoint,
  resolveEndpointAddress,
  type EndpointAddressing,
  type SocketConnector,
} from "./endpoint-dialer.js";
import type { AgentMetrics } from "./metrics.js";

/**
 * Bytes an endpoint socket may have queued for writing before the server is asked (FLOW_PAUSE)
 * to stop reading that connection's client, and the stall clock starts.
 */
export const ENDPOINT_WRITE_BUDGET = 4 * 1024 * 1024;

/**
 * Bytes an endpoint socket may have queued before the whole server stream is paused for it.
 * Reached only when the server ignores FLOW_PAUSE (the Go server): ours stops within one HTTP/2
 * window (16 MiB) plus its own send budget after the budget.
 */
export const ENDPOINT_WRITE_LIMIT = 64 * 1024 * 1024;

/** Default `--connection-stall-timeout`. */
export const DEFAULT_CONNECTION_STALL_TIMEOUT_MS = 60_000;

/**
 * Bytes queued on the server stream before endpoint reads are paused. Above the stream's 16 KiB
 * high-water mark so endpoint sockets are not paused and resumed for every 64 KiB chunk; "drain"
 * (buffer empty) resumes them.
 */
export const STREAM_SEND_BUDGET = 1024 * 1024;

/**
 * Bytes one endpoint socket may read into the server stream per turn while the stream is backed
 * up (its last send returned false) and other endpoints are sending too; then the socket waits
 * for the stream's next "drain", which starts a new turn. Busy connections thus share the stream
 * round robin, least recently served first. Without it the sockets with the fullest kernel
 * buffers took most of the stream (libuv reads a readable socket up to 32 times 64 KiB in a
 * row), and with the stream budget pausing and resuming all in one fixed order the last
 * connections got nothing. Each quantum costs a pause and a resume of the socket: 64 KiB quanta
 * (one socket read) were as fair but cost 10-25% of the aggregate throughput of 64 downloads;
 * 256 KiB quanta with this budget were less fair for 8 downloads (8 x 256 KiB is twice the
 * budget), and a 2 MiB budget cost a single download ~25% more agent CPU (buffers live longer).
 */
export const ENDPOINT_SEND_QUANTUM = 128 * 1024;

/** How long an endpoint socket closed by CLOSE_REQ may take to flush before it is destroyed. */
export const CLOSE_LINGER_MS = 10_000;

let lastConnectID = 0n;

/**
 * Allocate a connectID. One process-wide counter starting at 1 (not one per stream as in Go, whose
 * per-stream counters collide when one agent holds two streams to one server: upstream #462).
 */
export function allocateConnectID(): bigint {
  lastConnectID += 1n;
  return lastConnectID;
}

/** What a tunnel needs from its agent. */
export interface ServerTunnelDeps {
  addressing: EndpointAddressing;
  dialTimeoutMs: number;
  /**
   * Close a connection whose endpoint, while over its write budget, read nothing for this many
   * ms (0: never). Default {@link DEFAULT_CONNECTION_STALL_TIMEOUT_MS}.
   */
  connectionStallTimeoutMs?: number;
  /**
   * The server announced per-connection flow control (FLOW_CONTROL_METADATA). Without it no
   * FLOW_PAUSE / FLOW_RESUME is sent, and the over-limit fallback applies at once. Default false.
   */
  serverFlowControl?: boolean;
  /** Per-connection budget and limit (tests shrink them). */
  endpointWriteBudget?: number;
  endpointWriteLimit?: number;
  metrics: AgentMetrics;
  logger: Logger;
  /** Called with +1 / -1 as endpoint connections (dialling or open) come and go. */
  onEndpointCount: (delta: number) => void;
  /** Opens endpoint sockets (tests inject one to simulate hanging dials). */
  connect?: SocketConnector;
}

interface EndpointConnection {
  connectID: bigint;
  random: bigint;
  state: "dialing" | "open" | "closed";
  socket?: net.Socket;
  cancelDial?: () => void;
  /** DATA that arrived before the dial finished (Go queues it the same way). */
  early?: Uint8Array[];
  /** The server asked (FLOW_PAUSE) to stop reading this endpoint. */
  pausedByPeer?: boolean;
  /** We sent FLOW_PAUSE for this connection and owe FLOW_RESUME. */
  peerPaused?: boolean;
  /** Over the limit with a server that ignores FLOW_PAUSE: the stream is paused for us. */
  holding?: boolean;
  /** The stream turn (see ENDPOINT_SEND_QUANTUM) `sentInTurn` counts for, and the bytes sent in it. */
  turn?: number;
  sentInTurn?: number;
  /** Paused until the next turn: it used its quantum while the stream was backed up. */
  waitingTurn?: boolean;
  /** Bytes written to the endpoint so far (with writableLength: what it has read). */
  written?: number;
  stallTimer?: NodeJS.Timeout;
  stallMark?: number;
}

export interface ServerTunnelEvents {
  /** The tunnel is gone (stream or session ended); emitted once. */
  close: [reason: string];
}

/** A live Connect stream to one server and its endpoint connections. */
export class ServerTunnel extends EventEmitter<ServerTunnelEvents> {
  private readonly connections = new Map<bigint, EndpointConnection>();
  private readonly pendingDials = new Map<bigint, EndpointConnection>();
  private readonly lingering = new Set<net.Socket>();
  private readonly overBudget = new Set<EndpointConnection>();
  private sendBlocked = false;
  /** Incremented on every "drain" of the stream: a new turn for endpoints (ENDPOINT_SEND_QUANTUM). */
  private turn = 0;
  /** Endpoints that sent in this turn and in the previous one (a quantum applies only if several did). */
  private turnSenders = 0;
  private lastTurnSenders = 0;
  /** Endpoints paused until the next turn. */
  private readonly waitingTurn = new Set<EndpointConnection>();
  private closedReason: string | undefined;
  private drainSent = false;
  private ignoresFlowControl = false;
  private readonly log: Logger;
  private readonly stallTimeoutMs: number;
  private readonly budget: number;
  private readonly limit: number;

  constructor(
    readonly serverID: string,
    readonly session: http2.ClientHttp2Session,
    readonly call: ClientCall,
    private readonly deps: ServerTunnelDeps,
  ) {
    super();
    this.log = deps.logger.child({ serverID });
    this.stallTimeoutMs = deps.connectionStallTimeoutMs ?? DEFAULT_CONNECTION_STALL_TIMEOUT_MS;
    this.ignoresFlowControl = deps.serverFlowControl !== true;
    this.budget = deps.endpointWriteBudget ?? ENDPOINT_WRITE_BUDGET;
    this.limit = Math.max(this.budget, deps.endpointWriteLimit ?? ENDPOINT_WRITE_LIMIT);
    call.on("message", (frame) => this.receive(frame));
    call.on("drain", () => this.onStreamDrain());
    call.on("halfClose", () => this.close("server ended the stream"));
    call.on("close", (status) => {
      // Go counts a failed receive other than EOF as server_connection_failure_count{from_server}.
      if (!this.closed && status.code !== 0) {
        deps.metrics.serverConnectionFailures.labels("from_server").inc();
        deps.metrics.streamErrors.labels("to_agent", grpcCodeName(status.code), "Unknown").inc();
      }
      this.close(`stream closed: ${status.details || `status ${status.code}`}`);
    });
    session.on("close", () => this.close("session closed"));
    session.on("goaway", () => this.log.debug({}, "server sent GOAWAY"));
  }

  /** Endpoint connections that are dialling or open. */
  get endpointCount(): number {
    return this.connections.size;
  }

  get closed(): boolean {
    return this.closedReason !== undefined;
  }

  /** Send DRAIN once: the server should prefer other agents for new dials. */
  drain(): void {
    if (this.drainSent || this.closed) return;
    this.drainSent = true;
    this.send({ type: PacketType.DRAIN });
    this.log.info({}, "sent DRAIN");
  }

  /** End the tunnel: destroy every endpoint socket, abandon dials, cancel the stream, drop the session. */
  close(reason: string): void {
    if (this.closedReason !== undefined) return;
    this.closedReason = reason;
    this.log.info({ reason, endpoints: this.connections.size }, "server tunnel closed");
    for (const conn of [...this.connections.values()]) this.discard(conn, true);
    for (const socket of this.lingering) socket.destroy();
    this.lingering.clear();
    this.call.abort({ code: 1, details: reason });
    if (!this.session.destroyed) this.session.destroy();
    this.emit("close", reason);
  }

  private send(packet: Packet): void {
    if (this.closed) return;
    this.deps.metrics.packet("from_agent", packet.type);
    this.afterSend(sendPacket(this.call, packet));
  }

  /** Handle one gRPC frame from the server (prefix included). */
  receive(frame: Buffer): void {
    const flow = decodeFlowControl(frame.subarray(FRAME_HEADER));
    if (flow) {
      this.deps.metrics.packet("to_agent", flow.type);
      this.onFlowControl(flow.connectID, flow.type === FlowControl.PAUSE);
      return;
    }
    let packet: Packet;
    try {
      packet = decodePacket(frame.subarray(FRAME_HEADER));
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, "dropping malformed packet from server");
      return;
    }
    this.deps.metrics.packet("to_agent", packet.type);
    if ("dialRequest" in packet) this.onDialRequest(packet.dialRequest);
    else if ("data" in packet) this.onData(packet.data.connectID, packet.data.data);
    else if ("closeRequest" in packet) this.onCloseRequest(packet.closeRequest.connectID);
    else if ("closeDial" in packet) this.onCloseDial(packet.closeDial.random);
    else this.log.debug({ type: packet.type }, "ignoring packet type the agent does not handle");
  }

  private onDialRequest(req: DialRequest): void {
    const connectID = allocateConnectID();
    const conn: EndpointConnection = { connectID, random: req.random, state: "dialing" };
    this.connections.set(connectID, conn);
    this.pendingDials.set(req.random, conn);
    this.deps.onEndpointCount(1);
    const target = resolveEndpointAddress(req.address, this.deps.addressing);
    const started = performance.now();
    this.log.debug({ connectID, address: req.address, target }, "dialing endpoint");
    conn.cancelDial = dialEndpoint(
      req.protocol,
      target,
      this.deps.dialTimeoutMs,
      (failure, socket) => {
        conn.cancelDial = undefined;
        this.pendingDials.delete(req.random);
        if (failure || !socket) {
          const error = failure?.message ?? "dial failed";
          this.deps.metrics.endpointDialFailures.labels(failure?.reason ?? "unknown").inc();
          this.log.debug({ connectID, address: req.address, error }, "endpoint dial failed");
          this.forget(conn);
          this.send({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID: 0n, error } });
          return;
        }
        this.deps.metrics.dialDuration.observe((performance.now() - started) / 1000);
        this.attach(conn, socket);
        this.send({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID, error: "" } });
        for (const chunk of conn.early ?? []) this.writeEndpoint(conn, chunk);
        conn.early = undefined;
      },
      this.deps.connect,
    );
  }

  private attach(conn: EndpointConnection, socket: net.Socket): void {
    conn.state = "open";
    conn.socket = socket;
    socket.setNoDelay(true);
    if (this.sendBlocked || conn.pausedByPeer) socket.pause();
    socket.on("data", (chunk: Buffer) => {
      if (conn.state !== "open") return;
      // Least recently served first: the map's order is the order `onStreamDrain` resumes in.
      this.connections.delete(conn.connectID);
      this.connections.set(conn.connectID, conn);
      this.deps.metrics.packet("from_agent", PacketType.DATA, Math.ceil(chunk.length / MAX_DATA_CHUNK));
      const ok = sendData(this.call, conn.connectID, chunk);
      if (conn.turn !== this.turn) {
        conn.turn = this.turn;
        conn.sentInTurn = 0;
        this.turnSenders++;
      }
      conn.sentInTurn = (conn.sentInTurn ?? 0) + chunk.length;
      // Only between several busy endpoints (one alone reads on, as fast as the stream takes it).
      // "drain" follows a send that returned false, so a socket paused here is resumed.
      const competing = this.turnSenders > 1 || this.lastTurnSenders > 1;
      if (!ok && competing && conn.sentInTurn >= ENDPOINT_SEND_QUANTUM && !conn.waitingTurn) {
        conn.waitingTurn = true;
        this.waitingTurn.add(conn);
        socket.pause();
      }
      this.afterSend(ok);
    });
    // Reads arrive before "end", and sends are queued in order: CLOSE_RSP follows all the data.
    socket.on("end", () => this.endpointGone(conn, "endpoint EOF"));
    socket.on("error", (err) => this.endpointGone(conn, `endpoint error: ${err.message}`));
    socket.on("close", () => this.endpointGone(conn, "endpoint closed"));
    socket.on("drain", () => this.endpointDrained(conn));
  }

  // ---- per-connection flow control (docs/flow-control.md) ----------------------------------

  /** FLOW_PAUSE / FLOW_RESUME from our server: that connection's client is slow. */
  private onFlowControl(connectID: bigint, pause: boolean): void {
    const conn = this.connections.get(connectID);
    if (!conn) return;
    conn.pausedByPeer = pause;
    if (conn.state !== "open" || !conn.socket) return;
    if (pause) conn.socket.pause();
    else if (!this.sendBlocked) conn.socket.resume();
  }

  private sendFlow(conn: EndpointConnection, type: FlowControl): void {
    if (this.closed || this.ignoresFlowControl) return;
    this.deps.metrics.packet("from_agent", type);
    this.afterSend(this.call.send(sealFrame(encodeFlowControl(type, conn.connectID, FRAME_HEADER))));
  }

  /** The endpoint's write buffer is over the budget. */
  private endpointOverBudget(conn: EndpointConnection, buffered: number): void {
    if (!conn.peerPaused) {
      conn.peerPaused = true;
      this.sendFlow(conn, FlowControl.PAUSE);
      this.armStallTimer(conn);
    }
    if (buffered > this.limit && !conn.holding) {
      conn.holding = true;
      if (!this.ignoresFlowControl) {
        this.ignoresFlowControl = true;
        this.log.info(
          { connectID: conn.connectID, buffered },
          "server ignores per-connection flow control; pausing the stream while an endpoint is over the limit",
        );
      }
      this.overBudget.add(conn);
      this.call.pause();
    }
  }

  private endpointDrained(conn: EndpointConnection): void {
    this.clearStallTimer(conn);
    if (conn.peerPaused) {
      conn.peerPaused = false;
      if (conn.state === "open") this.sendFlow(conn, FlowControl.RESUME);
    }
    conn.holding = false;
    if (this.overBudget.delete(conn)) this.maybeResumeStream();
  }

  private armStallTimer(conn: EndpointConnection): void {
    if (this.stallTimeoutMs <= 0) return;
    this.clearStallTimer(conn);
    conn.stallMark = this.endpointDelivered(conn);
    conn.stallTimer = setTimeout(() => this.stallCheck(conn), this.stallTimeoutMs);
    conn.stallTimer.unref();
  }

  private clearStallTimer(conn: EndpointConnection): void {
    if (conn.stallTimer) clearTimeout(conn.stallTimer);
    conn.stallTimer = undefined;
  }

  private endpointDelivered(conn: EndpointConnection): number {
    return (conn.written ?? 0) - (conn.socket?.writableLength ?? 0);
  }

  /** The stall timer fired: close the connection unless the endpoint read something meanwhile. */
  private stallCheck(conn: EndpointConnection): void {
    conn.stallTimer = undefined;
    if (conn.state !== "open" || !conn.peerPaused) return;
    if (this.endpointDelivered(conn) > (conn.stallMark ?? 0)) {
      this.armStallTimer(conn); // slow, not stalled
      return;
    }
    const buffered = conn.socket?.writableLength ?? 0;
    const error =
      `connection stalled: the endpoint read nothing for ${this.stallTimeoutMs / 1000}s with ` +
      `${buffered} bytes buffered (--connection-stall-timeout)`;
    this.log.warn({ connectID: conn.connectID }, error);
    this.forget(conn);
    this.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: conn.connectID, error } });
    conn.socket?.destroy();
  }

  private endpointGone(conn: EndpointConnection, why: string): void {
    if (conn.state !== "open") return;
    this.log.debug({ connectID: conn.connectID, why }, "endpoint connection ended");
    this.forget(conn);
    this.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: conn.connectID, error: "" } });
    // allowHalfOpen is off: after "end" node finishes our side once pending writes are flushed.
    if (why !== "endpoint EOF") conn.socket?.destroy();
  }

  private onData(connectID: bigint, data: Uint8Array): void {
    if (connectID === 0n) {
      this.log.debug({}, "dropping DATA with connectID 0");
      return;
    }
    const conn = this.connections.get(connectID);
    if (!conn) {
      this.send({
        type: PacketType.CLOSE_RSP,
        closeResponse: { connectID, error: DialErrors.unrecognizedConnectID },
      });
      return;
    }
    if (conn.state === "dialing") (conn.early ??= []).push(data);
    else this.writeEndpoint(conn, data);
  }

  private writeEndpoint(conn: EndpointConnection, data: Uint8Array): void {
    const socket = conn.socket;
    if (!socket || socket.destroyed || socket.writableEnded || data.length === 0) return;
    conn.written = (conn.written ?? 0) + data.length;
    socket.write(data);
    if (socket.writableLength > this.budget) this.endpointOverBudget(conn, socket.writableLength);
  }

  private onCloseRequest(connectID: bigint): void {
    const conn = this.connections.get(connectID);
    if (!conn) {
      this.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: DialErrors.unknownConnectID } });
      return;
    }
    const socket = conn.socket;
    this.discard(conn, false);
    this.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: "" } });
    if (socket && !socket.destroyed) {
      // Flush what the client sent before its CLOSE_REQ, but do not wait for ever.
      this.lingering.add(socket);
      const timer = setTimeout(() => socket.destroy(), CLOSE_LINGER_MS);
      timer.unref();
      socket.once("close", () => {
        clearTimeout(timer);
        this.lingering.delete(socket);
      });
      socket.end();
    }
  }

  /** DIAL_CLS: the client gave up on a pending dial. The Go agent ignores it; we abandon the dial. */
  private onCloseDial(random: bigint): void {
    const conn = this.pendingDials.get(random);
    if (!conn) {
      this.log.debug({ random: random.toString() }, "DIAL_CLS for no pending dial");
      return;
    }
    this.log.debug({ connectID: conn.connectID }, "dial abandoned by DIAL_CLS");
    this.discard(conn, true);
  }

  /** Remove a connection from the tables (no packet sent). */
  private forget(conn: EndpointConnection): void {
    if (conn.state === "closed") return;
    conn.state = "closed";
    this.connections.delete(conn.connectID);
    if (this.pendingDials.get(conn.random) === conn) this.pendingDials.delete(conn.random);
    this.clearStallTimer(conn);
    conn.peerPaused = false;
    conn.holding = false;
    if (this.overBudget.delete(conn)) this.maybeResumeStream();
    conn.early = undefined;
    conn.waitingTurn = false;
    this.waitingTurn.delete(conn);
    this.deps.onEndpointCount(-1);
  }

  /** Forget a connection, cancel its dial, and optionally destroy its socket at once. */
  private discard(conn: EndpointConnection, destroy: boolean): void {
    conn.cancelDial?.();
    conn.cancelDial = undefined;
    this.forget(conn);
    if (destroy) conn.socket?.destroy();
  }

  /** `ok` is what the stream's send returned; false with a full budget pauses endpoint reads. */
  private afterSend(ok: boolean): void {
    if (ok || this.sendBlocked || this.closed || this.call.bufferedBytes <= STREAM_SEND_BUDGET) return;
    this.sendBlocked = true;
    for (const conn of this.connections.values()) conn.socket?.pause();
  }

  private onStreamDrain(): void {
    this.turn++;
    this.lastTurnSenders = this.turnSenders;
    this.turnSenders = 0;
    if (!this.sendBlocked && this.waitingTurn.size === 0) return;
    const all = this.sendBlocked;
    this.sendBlocked = false;
    const waiting = [...this.waitingTurn];
    for (const conn of waiting) conn.waitingTurn = false;
    this.waitingTurn.clear();
    // Least recently served first (see attach() and ENDPOINT_SEND_QUANTUM).
    for (const conn of all ? this.connections.values() : waiting)
      if (conn.state === "open" && !conn.pausedByPeer) conn.socket?.resume();
  }

  private maybeResumeStream(): void {
    if (this.overBudget.size === 0 && !this.closed) this.call.resume();
  }
}
