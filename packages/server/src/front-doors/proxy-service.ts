/**
 * The gRPC front door: `/ProxyService/Proxy` streams from konnectivity clients. The server
 * handles DIAL_REQ, DATA, CLOSE_REQ and DIAL_CLS and relays agent packets back unchanged. As in
 * Go, the server never ends a Proxy stream after a CLOSE_RSP or a dial error: the client does.
 * When the client goes away (or half-closes) everything still open is cleaned up: DIAL_CLS to
 * the agent for pending dials, CLOSE_REQ for established connections.
 */
import { constants as http2constants } from "node:http2";
import {
  DialErrors,
  PacketDecodeError,
  PacketType,
  decodePacket,
  type Packet,
  type PacketRoute,
} from "@cluster-proxy/protocol";
import { FRAME_HEADER, GrpcStatus, type ServerCall } from "@cluster-proxy/tunnel";
import { type Logger } from "@cluster-proxy/kit";
import type { DialFailure, FrontendEnd, PendingDial, TunnelConnection } from "../agents/backend.js";
import { packetFrame, routeFrame, type Relay } from "../routing/relay.js";
import type { ServerMetrics } from "../metrics.js";

/**
 * Bytes the shared agent stream may hold in its send buffer before a frontend stops reading its
 * client (every connection of the agent shares that stream, so this is fair-share backpressure,
 * not per connection). Towards the client, buffering is per connection: see the relay's
 * CONNECTION_BUFFER_BUDGET and docs/design/flow-control.md.
 */
export const STREAM_BUFFER_BUDGET = 4 * 1024 * 1024;

export class ProxyStream implements FrontendEnd {
  private readonly dials = new Map<bigint, PendingDial>();
  private readonly conns = new Map<bigint, TunnelConnection>();
  /** Connections told when this stream's send buffer drains. */
  private readonly stalled = new Set<TunnelConnection>();
  /** Connections whose agent asked (FLOW_PAUSE) to stop reading this client. */
  private readonly pausedByAgent = new Set<TunnelConnection>();
  private waitingForAgent = false;
  private done = false;
  /** Bytes handed to the call so far (with {@link ServerCall.bufferedBytes}: what left it). */
  private sentBytes = 0;

  constructor(
    private readonly call: ServerCall,
    private readonly relay: Relay,
    private readonly metrics: ServerMetrics,
    private readonly log: Logger,
  ) {
    call.on("message", (frame) => this.onFrame(frame));
    call.on("drain", () => {
      const stalled = [...this.stalled];
      this.stalled.clear();
      for (const c of stalled) c.drained();
    });
    call.on("halfClose", () => {
      this.cleanup("client half-closed the stream");
      call.finish({ code: GrpcStatus.OK, details: "" });
    });
    call.on("close", (status) => {
      if (call.overflowed) {
        metrics.streamCut("Proxy");
        log.warn({ details: status.details }, "client stream cut: the client does not read");
      }
      this.cleanup(status.details);
    });
  }

  private send(frame: Buffer, type: number): boolean {
    this.metrics.packet("to_client", type);
    this.sentBytes += frame.length;
    const started = performance.now();
    // Replies and close packets are bounded control frames: a client that sends requests and
    // never reads the replies is cut (the tunnel's SendLimits), its data is flow-controlled.
    const ok = type === PacketType.DATA ? this.call.send(frame) : this.call.sendControl(frame);
    this.metrics.frontendWrite(started);
    return ok;
  }

  /** Read the client unless the agent stream is backed up or an agent asked us to pause. */
  private updateReading(): void {
    if (this.done) return;
    if (this.waitingForAgent || this.pausedByAgent.size > 0) this.call.pause();
    else this.call.resume();
  }

  private onFrame(frame: Buffer): void {
    let route: PacketRoute;
    let packet: Packet | undefined;
    try {
      ({ route, frame, packet } = routeFrame(frame));
    } catch (err) {
      if (!(err instanceof PacketDecodeError)) throw err;
      this.log.warn({ err: err.message }, "dropping malformed packet from client");
      return;
    }
    this.metrics.packet("from_client", route.type);
    switch (route.type) {
      case PacketType.DIAL_REQ: {
        const p = packet ?? decodePacket(frame.subarray(FRAME_HEADER));
        if (!("dialRequest" in p)) return;
        const dial = this.relay.dial(this, { address: p.dialRequest.address, random: route.random, frame });
        if (dial) this.dials.set(dial.random, dial);
        return;
      }
      case PacketType.DATA: {
        if (route.connectID === 0n) return;
        const conn = this.conns.get(route.connectID);
        if (!conn) {
          this.unknownConnection(route.connectID);
          return;
        }
        if (!this.relay.toAgent(conn, frame, PacketType.DATA, STREAM_BUFFER_BUDGET)) this.waitForAgent(conn);
        return;
      }
      case PacketType.CLOSE_REQ: {
        const conn = this.conns.get(route.connectID);
        if (!conn) {
          this.unknownConnection(route.connectID);
          return;
        }
        // Forward; keep the entry until the agent's CLOSE_RSP, which we pass on.
        this.relay.toAgent(conn, frame, PacketType.CLOSE_REQ, Number.POSITIVE_INFINITY);
        return;
      }
      case PacketType.DIAL_CLS: {
        const dial = this.dials.get(route.random);
        if (!dial) return;
        this.dials.delete(route.random);
        this.relay.cancelDial(dial);
        return;
      }
      default:
        this.log.debug({ type: route.type }, "ignoring unexpected packet from client");
    }
  }

  private unknownConnection(connectID: bigint): void {
    this.send(
      packetFrame({ type: PacketType.CLOSE_RSP, closeResponse: { connectID, error: DialErrors.unknownConnectID } }),
      PacketType.CLOSE_RSP,
    );
  }

  /** The agent stream is over budget: stop reading the client until it drains. */
  private waitForAgent(conn: TunnelConnection): void {
    if (this.waitingForAgent) return;
    this.waitingForAgent = true;
    this.updateReading();
    conn.backend.whenDrained(() => {
      this.waitingForAgent = false;
      this.updateReading();
    });
  }

  // ---- FrontendEnd ------------------------------------------------------------------------

  dialSucceeded(random: bigint, conn: TunnelConnection, frame: Buffer): void {
    this.dials.delete(random);
    if (this.done) {
      this.relay.frontendClosed(conn);
      return;
    }
    this.conns.set(conn.connectID, conn);
    this.send(frame, PacketType.DIAL_RSP);
  }

  dialFailed(random: bigint, failure: DialFailure): void {
    this.dials.delete(random);
    if (this.done) return;
    if (failure.frame) {
      this.send(failure.frame, failure.kind === "dial_closed" ? PacketType.DIAL_CLS : PacketType.DIAL_RSP);
      return;
    }
    this.send(
      packetFrame({ type: PacketType.DIAL_RSP, dialResponse: { random, connectID: 0n, error: failure.text } }),
      PacketType.DIAL_RSP,
    );
  }

  data(conn: TunnelConnection, frame: Buffer): number {
    if (this.done) return 0;
    if (!this.send(frame, PacketType.DATA)) this.stalled.add(conn);
    return this.call.bufferedBytes;
  }

  delivered(_conn: TunnelConnection): number {
    return this.sentBytes - this.call.bufferedBytes;
  }

  buffered(_conn: TunnelConnection): number {
    return this.call.bufferedBytes;
  }

  pauseSource(conn: TunnelConnection, paused: boolean): void {
    if (paused) this.pausedByAgent.add(conn);
    else this.pausedByAgent.delete(conn);
    this.updateReading();
  }

  /** The client stopped reading: reset the whole Proxy stream (its reader is this stream). */
  stallClose(_conn: TunnelConnection, why: string): void {
    if (this.done) return;
    this.cleanup(why);
    // Trailers would queue behind the unread data: reset the stream so the buffer is freed
    // and the client sees the end now.
    this.call.finish({ code: GrpcStatus.UNAVAILABLE, details: why });
    if (!this.call.http2Stream.destroyed) this.call.http2Stream.close(http2constants.NGHTTP2_CANCEL);
  }

  closed(conn: TunnelConnection, frame: Buffer | undefined, cut?: string): void {
    this.conns.delete(conn.connectID);
    this.stalled.delete(conn);
    if (this.pausedByAgent.delete(conn)) this.updateReading();
    if (this.done) return;
    // A cut connection's CLOSE_RSP carries the reason; Go clients ignore the field (EOF).
    this.send(
      frame ??
        packetFrame({ type: PacketType.CLOSE_RSP, closeResponse: { connectID: conn.connectID, error: cut ?? "" } }),
      PacketType.CLOSE_RSP,
    );
  }

  private cleanup(why: string): void {
    if (this.done) return;
    this.done = true;
    for (const dial of this.dials.values()) this.relay.cancelDial(dial);
    this.dials.clear();
    for (const conn of this.conns.values()) this.relay.frontendClosed(conn);
    this.conns.clear();
    this.stalled.clear();
    this.pausedByAgent.clear();
    this.log.debug({ why }, "proxy stream closed");
  }
}
