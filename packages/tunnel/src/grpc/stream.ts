/**
 * One gRPC bidi stream on a node:http2 stream, shared by the server and client sides: sealed frames,
 * HTTP/2 flow control, and bounded queues for a peer that does not read ({@link SendLimits}).
 * Design: docs/design/decisions.md#grpc-on-nodehttp2-not-grpcgrpc-js
 */
import { EventEmitter } from "node:events";
import * as http2 from "node:http2";
import { FrameDecoder, FrameError } from "./framing.js";
import { GrpcStatus, type StreamStatus } from "./status.js";

export interface GrpcStreamEvents {
  /** A complete frame (prefix included; the message is `frame.subarray(5)`). */
  message: [frame: Buffer];
  /** The peer will send no more messages. */
  halfClose: [];
  drain: [];
  /** Client side only: the server's response headers arrived. */
  headers: [headers: http2.IncomingHttpHeaders];
  /** The stream is over; emitted exactly once. */
  close: [status: StreamStatus];
}

/**
 * Bytes of control frames (`sendControl`) a stream may hold unflushed before it is cut: some
 * 30,000 to 70,000 CLOSE_RSP, DIAL_RSP or DIAL_REQ packets, far beyond what a peer that reads ever
 * has queued, and a bound on what one that never reads costs (with Node's per-write bookkeeping,
 * a few tens of MiB).
 */
export const CONTROL_SEND_LIMIT = 2 * 1024 * 1024;

/**
 * Bytes a stream's send buffer may hold before it is cut: a backstop above every data bound (a
 * connection's 64 MiB flow-control limit, the 4 MiB shared-stream budgets).
 */
export const STREAM_SEND_LIMIT = 256 * 1024 * 1024;

/** The bounds of what one stream queues for its peer (see the module comment); 0 is no bound. */
export interface SendLimits {
  /** Unflushed bytes of control frames; default {@link CONTROL_SEND_LIMIT}. */
  controlBytes: number;
  /** Bytes in the send buffer; default {@link STREAM_SEND_LIMIT}. */
  queuedBytes: number;
}

export abstract class GrpcStream extends EventEmitter<GrpcStreamEvents> {
  protected readonly decoder: FrameDecoder;
  private closedStatus: StreamStatus | undefined;
  private limits: SendLimits = { controlBytes: CONTROL_SEND_LIMIT, queuedBytes: STREAM_SEND_LIMIT };
  /** Bytes of control frames written and not yet flushed. */
  private controlQueued = 0;
  private overflowedBound = false;

  constructor(
    readonly http2Stream: http2.Http2Stream,
    maxMessageBytes: number,
  ) {
    super();
    this.decoder = new FrameDecoder(maxMessageBytes, (frame) => this.emit("message", frame));
    http2Stream.on("data", (chunk: Buffer) => {
      // After the call is over (or the peer broke framing) bytes are read and dropped, so the
      // session's flow-control window keeps moving, but never parsed as frames again.
      if (this.closedStatus) return;
      try {
        this.decoder.push(chunk);
      } catch (err) {
        const fe = err instanceof FrameError ? err : new FrameError(String(err), GrpcStatus.INTERNAL);
        this.abort({ code: fe.grpcStatus, details: fe.message });
      }
    });
    http2Stream.on("end", () => this.emit("halfClose"));
    http2Stream.on("drain", () => this.emit("drain"));
    http2Stream.on("error", () => {
      /* reported through close */
    });
  }

  /** Change the bounds of what this stream queues (tests and special streams). */
  limitSends(limits: Partial<SendLimits>): void {
    this.limits = { ...this.limits, ...limits };
  }

  /** Whether the stream can take a frame now. */
  private get writable(): boolean {
    return !this.closedStatus && !this.http2Stream.destroyed && !this.http2Stream.writableEnded;
  }

  /**
   * Send a sealed frame. Returns false when the caller should wait for "drain", or when the
   * stream is over (a frame that passes {@link SendLimits.queuedBytes} cuts it).
   */
  send(frame: Buffer): boolean {
    if (!this.writable) return false;
    const ok = this.http2Stream.write(frame);
    const bound = this.limits.queuedBytes;
    if (bound > 0 && this.http2Stream.writableLength > bound) {
      this.cut(`the peer does not read: ${this.http2Stream.writableLength} bytes queued (limit ${bound})`);
      return false;
    }
    return ok;
  }

  /**
   * Send a control frame (a reply or a close/dial packet rather than a connection's data): as
   * {@link send}, and its bytes count against {@link SendLimits.controlBytes} until flushed.
   */
  sendControl(frame: Buffer): boolean {
    if (!this.writable) return false;
    const bound = this.limits.controlBytes;
    if (bound <= 0) return this.send(frame);
    const length = frame.length;
    this.controlQueued += length;
    const ok = this.http2Stream.write(frame, () => {
      this.controlQueued -= length;
    });
    if (this.controlQueued > bound) {
      this.cut(
        `the peer does not read its replies: ${this.controlQueued} bytes of control packets queued (limit ${bound})`,
      );
      return false;
    }
    const total = this.limits.queuedBytes;
    if (total > 0 && this.http2Stream.writableLength > total) {
      this.cut(`the peer does not read: ${this.http2Stream.writableLength} bytes queued (limit ${total})`);
      return false;
    }
    return ok;
  }

  /** The stream was cut because the peer did not read (it passed a {@link SendLimits} bound). */
  get overflowed(): boolean {
    return this.overflowedBound;
  }

  /** Bytes of control frames written and not yet flushed. */
  get controlBytesQueued(): number {
    return this.controlQueued;
  }

  /**
   * Cut the stream: close it with RESOURCE_EXHAUSTED and `details`, and reset it so its buffer
   * is freed now (trailers would queue behind what the peer does not read).
   */
  private cut(details: string): void {
    this.overflowedBound = true;
    this.settle({ code: GrpcStatus.RESOURCE_EXHAUSTED, details });
    if (!this.http2Stream.destroyed) this.http2Stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }

  /** Bytes queued for sending. */
  get bufferedBytes(): number {
    return this.http2Stream.writableLength;
  }

  get closed(): boolean {
    return this.closedStatus !== undefined;
  }

  pause(): void {
    this.http2Stream.pause();
  }

  resume(): void {
    this.http2Stream.resume();
  }

  /** End the stream abruptly with a status (server: trailers or RST; client: RST_STREAM CANCEL). */
  abstract abort(status: StreamStatus): void;

  protected settle(status: StreamStatus): void {
    if (this.closedStatus) return;
    this.closedStatus = status;
    this.emit("close", status);
  }
}
