/**
 * The relay as a byte-stream front door sees it (the HTTP CONNECT door): it dials an address,
 * hands over payload bytes and gets payload bytes back. The gRPC framing and the packet codec
 * (DATA packets of at most `MAX_DATA_CHUNK` bytes, sealed frames, the dial ids) stay here, on the
 * relay's side; the door deals only in bytes, sockets and HTTP answers.
 */
import { randomBytes } from "node:crypto";
import { MAX_DATA_CHUNK, PacketType, decodePacket, encodeData } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import type { Clock } from "@cluster-proxy/kit";
import type { DialFailure, FrontendEnd, PendingDial, TunnelConnection } from "../agents/backend.js";
import type { Relay } from "./relay.js";

/** A random dial id, like Go's `rand.Int63()` (non-negative int64). */
export function randomDialId(): bigint {
  return randomBytes(8).readBigUInt64BE() & 0x7fff_ffff_ffff_ffffn;
}

/**
 * The door's side of a connection: the relay's {@link FrontendEnd} with payloads instead of
 * frames (the calls mean what they mean there). `C` is the relay's handle of a connection, opaque
 * to the door.
 */
export interface PayloadEnd<C = TunnelConnection> {
  /** The agent accepted the dial: `conn` carries the connection from now on. */
  dialSucceeded(conn: C): void;
  /** The dial failed. */
  dialFailed(failure: DialFailure): void;
  /** Payload bytes from the agent; returns the bytes now buffered towards the reader. */
  data(conn: C, payload: Uint8Array): number;
  /** Bytes that have left the reader's buffer so far (monotonic). */
  delivered(conn: C): number;
  /** Bytes buffered towards the reader now. */
  buffered(conn: C): number;
  /** The agent asked to stop or resume reading this connection's source. */
  pauseSource(conn: C, paused: boolean): void;
  /** The reader stalled: drop what is buffered and end with an error naming `why`. */
  stallClose(conn: C, why: string): void;
  /** The connection is over; `cut` says why when the relay ended it (the reader should see an error). */
  closed(conn: C, cut?: string): void;
}

/**
 * What a byte-stream door calls on the relay. `C` and `D` are the relay's handles of a connection
 * and of a pending dial, opaque to the door.
 */
export interface PayloadRelay<C = TunnelConnection, D = PendingDial> {
  /** The relay's clock (the door's own deadlines and lingers run on it too). */
  readonly clock: Clock;
  /** Dial `address` for `end`; undefined when it failed at once (`end.dialFailed` was called). */
  dial(end: PayloadEnd<C>, address: string): D | undefined;
  /** The door gave up on a dial before its answer. */
  cancelDial(dial: D): void;
  /**
   * Send `payload` to the agent as DATA. False when the agent stream is over `budget`: the door
   * pauses its source until {@link PayloadRelay.whenAgentDrained} calls back.
   */
  send(conn: C, payload: Uint8Array, budget: number): boolean;
  /** Call `fn` once the agent stream of `conn` has drained. */
  whenAgentDrained(conn: C, fn: () => void): void;
  /** The door's buffer towards its reader drained. */
  readerDrained(conn: C): void;
  /** The door's side is gone: tell the agent. */
  frontendClosed(conn: C): void;
}

/** The relay's {@link FrontendEnd} for a {@link PayloadEnd}: frames decoded into payloads. */
class FramesToPayloads implements FrontendEnd {
  constructor(private readonly end: PayloadEnd) {}
  dialSucceeded(_random: bigint, conn: TunnelConnection): void {
    this.end.dialSucceeded(conn);
  }
  dialFailed(_random: bigint, failure: DialFailure): void {
    this.end.dialFailed(failure);
  }
  data(conn: TunnelConnection, frame: Buffer): number {
    const p = decodePacket(frame.subarray(FRAME_HEADER));
    if (!("data" in p) || p.data.data.length === 0) return this.end.buffered(conn);
    return this.end.data(conn, p.data.data);
  }
  delivered(conn: TunnelConnection): number {
    return this.end.delivered(conn);
  }
  buffered(conn: TunnelConnection): number {
    return this.end.buffered(conn);
  }
  pauseSource(conn: TunnelConnection, paused: boolean): void {
    this.end.pauseSource(conn, paused);
  }
  stallClose(conn: TunnelConnection, why: string): void {
    this.end.stallClose(conn, why);
  }
  closed(conn: TunnelConnection, _frame: Buffer | undefined, cut?: string): void {
    this.end.closed(conn, cut);
  }
}

/** `relay` as a {@link PayloadRelay}. */
export function payloadRelay(relay: Relay): PayloadRelay {
  return {
    clock: relay.clock,
    dial: (end, address) => relay.dial(new FramesToPayloads(end), { address, random: randomDialId() }),
    cancelDial: (dial) => relay.cancelDial(dial),
    send(conn, payload, budget) {
      let ok = true;
      for (let off = 0; off < payload.length; off += MAX_DATA_CHUNK) {
        const chunk = payload.subarray(off, Math.min(payload.length, off + MAX_DATA_CHUNK));
        const frame = sealFrame(encodeData(conn.connectID, chunk, FRAME_HEADER));
        ok = relay.toAgent(conn, frame, PacketType.DATA, budget) && ok;
      }
      return ok;
    },
    whenAgentDrained: (conn, fn) => conn.backend.whenDrained(fn),
    readerDrained: (conn) => conn.drained(),
    frontendClosed: (conn) => relay.frontendClosed(conn),
  };
}
