/**
 * One agent tunnel: the `/AgentService/Connect` stream to one proxy server (on its own HTTP/2
 * session) and the endpoint connections opened through it. Handles DIAL_REQ, DATA, CLOSE_REQ
 * and DIAL_CLS from the server and answers as the Go proxy-agent does.
 *
 * Backpressure (head-of-line limitation): konnectivity has no per-connection flow control, and all
 * connections of a tunnel share this one stream. When the stream's send buffer holds more than
 * {@link STREAM_SEND_BUDGET}, every endpoint socket reading into it is paused until "drain". When one endpoint socket's write
 * buffer exceeds {@link ENDPOINT_WRITE_BUDGET}, the whole server stream is paused until that
 * socket drains, so a single slow endpoint delays every connection of the tunnel (as with the Go
 * agent, but bounded in memory). Per-connection flow control is a later issue.
 */
import { EventEmitter } from "node:events";
import type * as http2 from "node:http2";
import type * as net from "node:net";
import {
  DialErrors,
  PacketType,
  decodePacket,
  MAX_DATA_CHUNK,
  type DialRequest,
  type Packet,
} from "@cluster-proxy/protocol";
import { FRAME_HEADER, sendData, sendPacket, type ClientCall, type Logger } from "@cluster-proxy/tunnel";
import {
  dialEndpoint,
  resolveEndpointAddress,
  type EndpointAddressing,
  type SocketConnector,
} from "./endpoint-dialer.js";
import type { AgentMetrics } from "./metrics.js";

/** Bytes an endpoint socket may have queued for writing before the server stream is paused. */
export const ENDPOINT_WRITE_BUDGET = 4 * 1024 * 1024;

/**
 * Bytes queued on the server stream before endpoint reads are paused. Above the stream's 16 KiB
 * high-water mark so endpoint sockets are not paused and resumed for every 64 KiB chunk; "drain"
 * (buffer empty) resumes them.
 */
export const STREAM_SEND_BUDGET = 1024 * 1024;

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
  private closedReason: string | undefined;
  private drainSent = false;
  private readonly log: Logger;

  constructor(
    readonly serverID: string,
    readonly session: http2.ClientHttp2Session,
    readonly call: ClientCall,
    private readonly deps: ServerTunnelDeps,
  ) {
    super();
    this.log = deps.logger.child({ serverID });
    call.on("message", (frame) => this.receive(frame));
    call.on("drain", () => this.onStreamDrain());
    call.on("halfClose", () => this.close("server ended the stream"));
    call.on("close", (status) => this.close(`stream closed: ${status.details || `status ${status.code}`}`));
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
    if (this.sendBlocked) socket.pause();
    socket.on("data", (chunk: Buffer) => {
      if (conn.state !== "open") return;
      this.deps.metrics.packet("from_agent", PacketType.DATA, Math.ceil(chunk.length / MAX_DATA_CHUNK));
      this.afterSend(sendData(this.call, conn.connectID, chunk));
    });
    // Reads arrive before "end", and sends are queued in order: CLOSE_RSP follows all the data.
    socket.on("end", () => this.endpointGone(conn, "endpoint EOF"));
    socket.on("error", (err) => this.endpointGone(conn, `endpoint error: ${err.message}`));
    socket.on("close", () => this.endpointGone(conn, "endpoint closed"));
    socket.on("drain", () => {
      if (this.overBudget.delete(conn)) this.maybeResumeStream();
    });
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
    socket.write(data);
    if (socket.writableLength > ENDPOINT_WRITE_BUDGET && !this.overBudget.has(conn)) {
      this.overBudget.add(conn);
      this.call.pause();
    }
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
    if (this.overBudget.delete(conn)) this.maybeResumeStream();
    conn.early = undefined;
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
    if (!this.sendBlocked) return;
    this.sendBlocked = false;
    for (const conn of this.connections.values()) if (conn.state === "open") conn.socket?.resume();
  }

  private maybeResumeStream(): void {
    if (this.overBudget.size === 0 && !this.closed) this.call.resume();
  }
}
