/**
 * One gRPC bidi stream on top of a node:http2 stream, shared by the server and client sides.
 * Messages travel as sealed frames (see framing.ts). Flow control is HTTP/2's: `send` returns
 * false when the stream's buffer is full (wait for "drain"); `pause` stops reading so the peer's
 * window closes.
 */
import { EventEmitter } from "node:events";
import type * as http2 from "node:http2";
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

export abstract class GrpcStream extends EventEmitter<GrpcStreamEvents> {
  protected readonly decoder: FrameDecoder;
  private closedStatus: StreamStatus | undefined;

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

  /** Send a sealed frame. Returns false when the caller should wait for "drain". */
  send(frame: Buffer): boolean {
    if (this.closedStatus || this.http2Stream.destroyed || this.http2Stream.writableEnded) return false;
    return this.http2Stream.write(frame);
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
