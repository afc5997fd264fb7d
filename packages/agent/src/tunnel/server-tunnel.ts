/**
 * One agent tunnel: the `/AgentService/Connect` stream to one proxy server and the endpoint connections
 * opened through it; answers as the Go proxy-agent does. Backpressure is the tunnel engine's.
 * Design: docs/design/flow-control.md#rules
 */
import { EventEmitter } from "node:events";
import type * as http2 from "node:http2";
import type { Duplex } from "node:stream";
import {
  DialErrors,
  FlowControl,
  PacketType,
  decodeFlowControl,
  decodePacket,
  MAX_DATA_CHUNK,
  type DialRequest,
  type Packet,
} from "@cluster-proxy/protocol";
import {
  ConnectionFlow,
  ConnectionTable,
  FRAME_HEADER,
  FlowState,
  SEND_QUANTUM,
  SharedStream,
  TurnScheduler,
  grpcCodeName,
  sendData,
  sendPacket,
  type ClientCall,
} from "@cluster-proxy/tunnel";
import { GATEWAY_ENDPOINT_DISABLED } from "@cluster-proxy/api";
import { type Logger, type Timers } from "@cluster-proxy/kit";
import {
  dialEndpoint,
  resolveEndpointAddress,
  type EndpointAddressing,
  type SocketConnector,
} from "../destination/endpoint-dialer.js";
import { isGatewayAddress, openInProcessStream } from "../gateway-endpoint/gateway-address.js";
import type { AgentMetrics, DialLimitFlag } from "../metrics.js";
import { errorMessage } from "@cluster-proxy/errors";

/**
 * Bytes queued on the server stream before endpoint reads are paused. Above the stream's 16 KiB
 * high-water mark so endpoint sockets are not paused and resumed for every 64 KiB chunk; "drain"
 * (buffer empty) resumes them.
 */
export const STREAM_SEND_BUDGET = 1024 * 1024;

/**
 * Bytes one endpoint socket may read into the server stream per turn while the stream is backed
 * up (its last send returned false) and other endpoints are sending too; then the socket waits
 * for the stream's next "drain", which starts a new turn (the engine's TurnScheduler and
 * SEND_QUANTUM, where the choice of 128 KiB with this stream budget is explained).
 */
export const ENDPOINT_SEND_QUANTUM = SEND_QUANTUM;

/**
 * How long the agent's last frames (CLOSE_RSP for each open connection, END_STREAM) may take to
 * reach the server on shutdown before the session is destroyed.
 */
export const SHUTDOWN_FLUSH_MS = 1_000;

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
   * TCP keepalive on endpoint sockets (ms of idle before the first probe; 0 or absent: off): an
   * endpoint that vanished without a FIN is noticed and its tunnelled connection closed.
   */
  tcpKeepaliveMs?: number;
  /**
   * Close a connection whose endpoint, while over its write budget, read nothing for this many
   * ms (0: never). Default: the tunnel engine's `DEFAULT_CONNECTION_STALL_TIMEOUT_MS`.
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
  /**
   * Counts one endpoint connection (dialling or open) until the function it returns is called
   * (the agent's kit `InFlight`, which a drain waits on).
   */
  beginEndpoint: () => () => void;
  /**
   * The dial caps: most endpoint connections (dialling or open) this tunnel (`perTunnel`) and the
   * whole agent (`perAgent`, counted by `agentCount`) may hold; 0 is no cap. A DIAL_REQ beyond a
   * cap is answered with a DIAL_RSP error naming its flag. Default: no caps.
   */
  dialLimits?: DialLimits;
  /** Opens endpoint sockets (tests inject one to simulate hanging dials). */
  connect?: SocketConnector;
  /** The stall timers' clock (tests drive it; default Node's timers). */
  timers?: Timers;
  /**
   * Serves the reserved gateway address (`gateway.cluster-proxy.invalid`, any port) in-process:
   * each accepted connection's byte stream is handed to `accept`. Absent: the gateway endpoint is
   * disabled and such dials are answered with {@link GATEWAY_ENDPOINT_DISABLED}.
   */
  gateway?: InProcessEndpoint;
}

/** An endpoint served inside the agent process (the gateway endpoint). */
export interface InProcessEndpoint {
  /** Take one connection's byte stream (the tunnel owns the other end, with its flow control). */
  accept(stream: Duplex): void;
}

/** See {@link ServerTunnelDeps.dialLimits}. */
export interface DialLimits {
  perTunnel: number;
  perAgent: number;
  /** Endpoint connections (dialling or open) of the whole agent now. */
  agentCount: () => number;
}

/**
 * The DIAL_RSP error of a dial refused by a cap: `dial to <address> refused: the agent already
 * holds <n> endpoint connections<where> (<flag>=<n>)`.
 */
export function dialLimitError(address: string, flag: DialLimitFlag, limit: number): string {
  const where = flag === "--max-dials-per-tunnel" ? " through this proxy server's tunnel" : "";
  return `dial to ${address} refused: the agent already holds ${limit} endpoint connections${where} (${flag}=${limit})`;
}

interface EndpointConnection {
  connectID: bigint;
  random: bigint;
  state: "dialing" | "open" | "closed";
  /** Ends its count in the agent's endpoint connections ({@link ServerTunnelDeps.beginEndpoint}). */
  readonly end: () => void;
  /** The endpoint's byte stream: a dialled socket, or the tunnel end of an in-process stream. */
  socket?: Duplex;
  cancelDial?: () => void;
  /** DATA that arrived before the dial finished (Go queues it the same way). */
  early?: Uint8Array[];
  /** The server asked (FLOW_PAUSE) to stop reading this endpoint. */
  pausedByPeer?: boolean;
  /** Flow control towards the endpoint (the engine's ConnectionFlow owns it). */
  readonly flow: FlowState;
  /** Bytes written to the endpoint so far (with writableLength: what it has read). */
  written?: number;
}

export interface ServerTunnelEvents {
  /** The tunnel is gone (stream or session ended); emitted once. */
  close: [reason: string];
  /** The server sent GOAWAY (it drains): the stream goes on, but the server is leaving. */
  goaway: [];
}

/** A live Connect stream to one server and its endpoint connections. */
export class ServerTunnel extends EventEmitter<ServerTunnelEvents> {
  /** Endpoint connections (dialling or open) by connectID. */
  private readonly connections = new ConnectionTable<EndpointConnection>();
  private readonly pendingDials = new Map<bigint, EndpointConnection>();
  private readonly lingering = new Set<Duplex>();
  /** The stream's send buffer is over STREAM_SEND_BUDGET: every endpoint read is paused until "drain". */
  private sendBlocked = false;
  /** Turns of busy endpoints on the backed-up stream (ENDPOINT_SEND_QUANTUM). */
  private readonly turns = new TurnScheduler<EndpointConnection>(ENDPOINT_SEND_QUANTUM);
  /** The stream as flow control sees it (held for an endpoint over its limit when the server ignores FLOW_PAUSE). */
  private readonly shared: SharedStream;
  /** Per-endpoint write budgets, FLOW_PAUSE / FLOW_RESUME and stall closes. */
  private readonly flow: ConnectionFlow<EndpointConnection>;
  private closedReason: string | undefined;
  private drainSent = false;
  /**
   * The server sent GOAWAY (our proxy-server drains: it takes no new dials and closes once its
   * tunnels are done): the agent counts it no more and connects to another replica meanwhile.
   */
  serverLeaving = false;
  private readonly log: Logger;

  constructor(
    readonly serverID: string,
    readonly session: http2.ClientHttp2Session,
    readonly call: ClientCall,
    private readonly deps: ServerTunnelDeps,
  ) {
    super();
    this.log = deps.logger.child({ serverID });
    const tunnelClosed = (): boolean => this.closed;
    this.shared = new SharedStream(
      {
        pause: () => call.pause(),
        resume: () => call.resume(),
        get closed() {
          return tunnelClosed();
        },
      },
      deps.serverFlowControl !== true,
    );
    this.flow = new ConnectionFlow<EndpointConnection>(
      {
        budget: deps.endpointWriteBudget,
        limit: deps.endpointWriteLimit,
        stallTimeoutMs: deps.connectionStallTimeoutMs,
        reader: "endpoint",
        timers: deps.timers,
      },
      {
        stream: () => this.shared,
        sendFlow: (_conn, type, frame) => {
          if (this.closed) return;
          this.deps.metrics.packet("from_agent", type);
          this.afterSend(this.call.sendControl(frame));
        },
        isOpen: (conn) => conn.state === "open" && !this.closed,
        delivered: (conn) => (conn.written ?? 0) - (conn.socket?.writableLength ?? 0),
        buffered: (conn) => conn.socket?.writableLength ?? 0,
        stalled: (conn, error) => {
          this.log.warn({ connectID: conn.connectID }, error);
          this.forget(conn);
          this.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: conn.connectID, error } });
          conn.socket?.destroy();
        },
        peerIgnoresFlowControl: (conn, buffered) =>
          this.log.info(
            { connectID: conn.connectID, buffered },
            "server ignores per-connection flow control; pausing the stream while an endpoint is over the limit",
          ),
      },
    );
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
    session.on("goaway", () => {
      if (this.serverLeaving) return;
      this.serverLeaving = true;
      this.log.info({}, "server sent GOAWAY (draining): connecting to another replica");
      this.emit("goaway");
    });
  }

  /** Endpoint connections that are dialling or open. */
  get endpointCount(): number {
    return this.connections.size;
  }

  get closed(): boolean {
    return this.closedReason !== undefined;
  }

  /** Endpoints that used their quantum of the backed-up stream and wait for its next "drain". */
  get waitingForTurn(): number {
    return this.turns.waitingCount;
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
    if (!this.finish(reason)) return;
    this.call.abort({ code: 1, details: reason });
    if (!this.session.destroyed) this.session.destroy();
  }

  /**
   * The agent's own end (shutdown): say it in-band before the transport goes. Every open
   * connection gets CLOSE_RSP with `reason` as its error and every pending dial a DIAL_RSP error,
   * the stream is ended (END_STREAM after those frames) and the session closed gracefully; after
   * `flushMs` whatever is left is destroyed. The server forwards each close to its client at once,
   * even when the transport's close is lost on the way (a tunnel through the hub apiserver).
   * Resolves once the session is gone.
   */
  shutdown(reason: string, flushMs: number = SHUTDOWN_FLUSH_MS): Promise<void> {
    if (this.closed) return Promise.resolve();
    for (const conn of this.connections.values()) {
      if (conn.state === "open")
        this.send({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: conn.connectID, error: reason } });
      else
        this.send({
          type: PacketType.DIAL_RSP,
          dialResponse: { random: conn.random, connectID: 0n, error: reason },
        });
    }
    this.call.end();
    this.finish(reason);
    const session = this.session;
    if (session.destroyed) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.call.abort({ code: 1, details: reason });
        session.destroy();
      }, flushMs);
      session.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
      // GOAWAY, then the session ends once the server has finished the stream (it answers our
      // END_STREAM with its trailers), which means it read every frame before.
      session.close();
    });
  }

  /** Mark the tunnel closed and let go of every endpoint; false if it was closed already. */
  private finish(reason: string): boolean {
    if (this.closedReason !== undefined) return false;
    this.closedReason = reason;
    this.log.info({ reason, endpoints: this.connections.size }, "server tunnel closed");
    for (const conn of [...this.connections.values()]) this.discard(conn, true);
    for (const socket of this.lingering) socket.destroy();
    this.lingering.clear();
    this.emit("close", reason);
    return true;
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
      this.log.warn({ err: errorMessage(err) }, "dropping malformed packet from server");
      return;
    }
    this.deps.metrics.packet("to_agent", packet.type);
    if ("dialRequest" in packet) this.onDialRequest(packet.dialRequest);
    else if ("data" in packet) this.onData(packet.data.connectID, packet.data.data);
    else if ("closeRequest" in packet) this.onCloseRequest(packet.closeRequest.connectID);
    else if ("closeDial" in packet) this.onCloseDial(packet.closeDial.random);
    else this.log.debug({ type: packet.type }, "ignoring packet type the agent does not handle");
  }

  /** The cap a new dial would pass, if any. */
  private dialCapReached(): { flag: DialLimitFlag; limit: number } | undefined {
    const limits = this.deps.dialLimits;
    if (!limits) return undefined;
    if (limits.perTunnel > 0 && this.connections.size >= limits.perTunnel) {
      return { flag: "--max-dials-per-tunnel", limit: limits.perTunnel };
    }
    if (limits.perAgent > 0 && limits.agentCount() >= limits.perAgent) {
      return { flag: "--max-dials", limit: limits.perAgent };
    }
    return undefined;
  }

  private onDialRequest(req: DialRequest): void {
    const cap = this.dialCapReached();
    if (cap) {
      const error = dialLimitError(req.address, cap.flag, cap.limit);
      this.deps.metrics.endpointDialFailures.labels("limit").inc();
      this.deps.metrics.dialLimitRefusals.labels(cap.flag).inc();
      this.log.debug({ address: req.address, error }, "dial refused by a dial cap");
      this.send({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID: 0n, error } });
      return;
    }
    if (isGatewayAddress(req.address)) {
      this.serveGateway(req);
      return;
    }
    const conn = this.newConnection(req.random);
    const { connectID } = conn;
    this.pendingDials.set(req.random, conn);
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
        const keepalive = this.deps.tcpKeepaliveMs ?? 0;
        if (keepalive > 0) socket.setKeepAlive(true, keepalive);
        socket.setNoDelay(true);
        this.attach(conn, socket);
        this.send({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID, error: "" } });
        for (const chunk of conn.early ?? []) this.writeEndpoint(conn, chunk);
        conn.early = undefined;
      },
      this.deps.connect,
      this.deps.timers,
    );
  }

  /** A new endpoint connection for the dial `random`, counted and tracked. */
  private newConnection(random: bigint): EndpointConnection {
    const conn: EndpointConnection = {
      connectID: allocateConnectID(),
      random,
      state: "dialing",
      end: this.deps.beginEndpoint(),
      flow: new FlowState(),
    };
    this.connections.add(conn);
    return conn;
  }

  /**
   * A dial to the reserved gateway address: never dialled and not subject to the destination
   * policy. With the endpoint enabled the connection is open at once and its byte stream goes to
   * the in-process endpoint (same flow control as a dialled socket); else a DIAL_RSP error.
   */
  private serveGateway(req: DialRequest): void {
    const gateway = this.deps.gateway;
    if (!gateway) {
      this.deps.metrics.endpointDialFailures.labels("unknown").inc();
      this.log.debug({ address: req.address }, GATEWAY_ENDPOINT_DISABLED);
      this.send({
        type: PacketType.DIAL_RSP,
        dialResponse: { random: req.random, connectID: 0n, error: GATEWAY_ENDPOINT_DISABLED },
      });
      return;
    }
    const conn = this.newConnection(req.random);
    const { connectID } = conn;
    const { tunnelSide, endpointSide } = openInProcessStream();
    this.log.debug({ connectID, address: req.address }, "serving the gateway endpoint in-process");
    this.attach(conn, tunnelSide);
    this.send({ type: PacketType.DIAL_RSP, dialResponse: { random: req.random, connectID, error: "" } });
    gateway.accept(endpointSide);
  }

  /** Start relaying an endpoint's byte stream (a connected socket or an in-process stream). */
  private attach(conn: EndpointConnection, socket: Duplex): void {
    conn.state = "open";
    conn.socket = socket;
    if (this.sendBlocked || conn.pausedByPeer) socket.pause();
    this.turns.add(conn);
    socket.on("data", (chunk: Buffer) => {
      if (conn.state !== "open") return;
      this.deps.metrics.packet("from_agent", PacketType.DATA, Math.ceil(chunk.length / MAX_DATA_CHUNK));
      const ok = sendData(this.call, conn.connectID, chunk);
      // Its quantum used while the stream is backed up: wait for the next turn. "drain" follows
      // a send that returned false, so a socket paused here is resumed.
      if (this.turns.sent(conn, chunk.length, ok)) socket.pause();
      this.afterSend(ok);
    });
    // Reads arrive before "end", and sends are queued in order: CLOSE_RSP follows all the data.
    socket.on("end", () => this.endpointGone(conn, "endpoint EOF"));
    socket.on("error", (err) => this.endpointGone(conn, `endpoint error: ${err.message}`));
    socket.on("close", () => this.endpointGone(conn, "endpoint closed"));
    socket.on("drain", () => this.flow.drained(conn));
  }

  // ---- per-connection flow control (docs/design/flow-control.md) ----------------------------------

  /** FLOW_PAUSE / FLOW_RESUME from our server: that connection's client is slow. */
  private onFlowControl(connectID: bigint, pause: boolean): void {
    const conn = this.connections.get(connectID);
    if (!conn) return;
    conn.pausedByPeer = pause;
    if (conn.state !== "open" || !conn.socket) return;
    if (pause) conn.socket.pause();
    else if (!this.sendBlocked) conn.socket.resume();
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
    this.flow.queued(conn, socket.writableLength);
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
    this.connections.remove(conn);
    if (this.pendingDials.get(conn.random) === conn) this.pendingDials.delete(conn.random);
    this.flow.release(conn);
    this.turns.remove(conn);
    conn.early = undefined;
    conn.end();
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

  /** A new turn: resume the endpoints that waited for it, or all when the stream budget paused them. */
  private onStreamDrain(): void {
    const all = this.sendBlocked;
    this.sendBlocked = false;
    // Least recently served first (the TurnScheduler's order).
    for (const conn of this.turns.nextTurn(all)) if (conn.state === "open" && !conn.pausedByPeer) conn.socket?.resume();
  }
}
