/**
 * The gRPC front door: `/ProxyService/Proxy` streams from konnectivity clients. The server
 * handles DIAL_REQ, DATA, CLOSE_REQ and DIAL_CLS and relays agent packets back unchanged. As in
 * Go, the server never ends a Proxy stream after a CLOSE_RSP or a dial error: the client does.
 * When the client goes away (or half-closes) everything still open is cleaned up: DIAL_CLS to
 * the agent for pending dials, CLOSE_REQ for established connections.
 */
import { DialErrors, PacketDecodeError, PacketType, decodePacket, peekPacket } from "@cluster-proxy/protocol";
import { FRAME_HEADER, GrpcStatus, type Logger, type ServerCall } from "@cluster-proxy/tunnel";
import type { DialFailure, FrontendEnd, PendingDial, TunnelConnection } from "./backend.js";
import { packetFrame, type Relay } from "./relay.js";
import type { ServerMetrics } from "./metrics.js";

/**
 * Bytes a frontend (or agent) stream may hold in its send buffer before we stop reading the
 * other side. The protocol has no per-connection flow control, so pausing an agent stream for
 * one slow client stalls every connection on that agent stream (head-of-line blocking, as in
 * the Go server); the budget only bounds memory. Per-connection flow control is a later issue.
 */
export const STREAM_BUFFER_BUDGET = 4 * 1024 * 1024;

export class ProxyStream implements FrontendEnd {
  private readonly dials = new Map<bigint, PendingDial>();
  private readonly conns = new Map<bigint, TunnelConnection>();
  /** Connections waiting for this stream to drain before the agent is read again. */
  private readonly stalled = new Set<TunnelConnection>();
  private waitingForAgent = false;
  private done = false;

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
    call.on("close", (status) => this.cleanup(status.details));
  }

  private send(frame: Buffer, type: number): boolean {
    this.metrics.packet("to_client", type);
    return this.call.send(frame);
  }

  private onFrame(frame: Buffer): void {
    let route;
    try {
      route = peekPacket(frame.subarray(FRAME_HEADER));
    } catch (err) {
      if (!(err instanceof PacketDecodeError)) throw err;
      this.log.warn({ err: err.message }, "dropping malformed packet from client");
      return;
    }
    this.metrics.packet("from_client", route.type);
    switch (route.type) {
      case PacketType.DIAL_REQ: {
        const p = decodePacket(frame.subarray(FRAME_HEADER));
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
    this.call.pause();
    conn.backend.whenDrained(() => {
      this.waitingForAgent = false;
      if (!this.done) this.call.resume();
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

  data(conn: TunnelConnection, frame: Buffer): boolean {
    if (this.done) return true;
    if (this.send(frame, PacketType.DATA) || this.call.bufferedBytes <= STREAM_BUFFER_BUDGET) return true;
    this.stalled.add(conn);
    return false;
  }

  closed(conn: TunnelConnection, frame: Buffer | undefined, cut?: string): void {
    this.conns.delete(conn.connectID);
    this.stalled.delete(conn);
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
    this.log.debug({ why }, "proxy stream closed");
  }
}
