/**
 * The byte stream under a client HTTP/2 session: the TLS (or Unix) socket behind a JS Duplex, which
 * keeps two node:http2 peers from deadlocking on their mutual writes.
 * Design: docs/design/flow-control.md#two-nodehttp2-peers-can-deadlock-the-session-transport
 */
import { Duplex } from "node:stream";
import type * as net from "node:net";
import type * as tls from "node:tls";

/**
 * Bytes the socket may have queued before a session write waits for "drain". Twice the largest
 * connection window a tunnel peer grants (32 MiB): reached only by a peer that stopped reading.
 */
export const TRANSPORT_HOLD_BYTES = 64 * 1024 * 1024;

export class SessionTransport extends Duplex {
  /** The callback of a write held until the socket drains. */
  private held: ((err?: Error | null) => void) | undefined;

  constructor(
    readonly socket: net.Socket,
    private readonly holdBytes = TRANSPORT_HOLD_BYTES,
  ) {
    // Read ahead up to 1 MiB while the session is not reading (it pauses us for every write),
    // so the socket is not paused and resumed each time.
    super({ allowHalfOpen: false, readableHighWaterMark: 1024 * 1024 });
    // node's session turns these on for its socket, which is now the JS wrapper (a no-op there).
    socket.setNoDelay(true);
    (socket as Partial<tls.TLSSocket>).disableRenegotiation?.();
    socket.on("data", (chunk: Buffer) => {
      if (!this.push(chunk)) socket.pause();
    });
    // The peer's end (or a clean close) closes the transport once the session has read what came
    // before, and never ends it: node asserts when the session writes after an end (design doc).
    socket.on("end", () => this.closeOnceRead());
    socket.on("drain", () => this.release());
    socket.on("error", (err) => this.destroy(err));
    socket.on("close", () => this.closeOnceRead());
  }

  override _read(): void {
    this.socket.resume();
  }

  /** Whatever `read()` hands over; the last read after the peer's end closes the transport. */
  override read(size?: number): unknown {
    const chunk: unknown = super.read(size);
    this.closeOnceRead();
    return chunk;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.socket.write(chunk);
    this.complete(callback);
  }

  override _writev(chunks: { chunk: Buffer }[], callback: (err?: Error | null) => void): void {
    this.socket.cork();
    for (const { chunk } of chunks) this.socket.write(chunk);
    this.socket.uncork();
    this.complete(callback);
  }

  override _final(callback: (err?: Error | null) => void): void {
    // Finish once the socket has flushed what we queued: node destroys the transport next.
    this.socket.end(() => callback());
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.release(err);
    if (!this.socket.destroyed) this.socket.destroy(err ?? undefined);
    callback(err);
  }

  private complete(callback: (err?: Error | null) => void): void {
    if (this.socket.writableLength <= this.holdBytes) callback();
    else this.held = callback;
  }

  /** Close once the socket delivers nothing more (its end, or its close) and the session read it all. */
  private closeOnceRead(): void {
    if (this.readableLength === 0 && (this.socket.readableEnded || this.socket.destroyed)) this.destroy();
  }

  private release(err?: Error | null): void {
    const callback = this.held;
    this.held = undefined;
    callback?.(err);
  }
}
