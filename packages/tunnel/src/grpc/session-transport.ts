/**
 * The byte stream under a client HTTP/2 session: the TLS (or Unix) socket behind a JS Duplex.
 * Works around a mutual-write deadlock between two node:http2 endpoints (docs/design/flow-control.md,
 * "Two node:http2 peers can deadlock").
 *
 * node's Http2Session stops reading its socket while one of its own writes is in progress
 * (`MaybeStopReading` in src/node_http2.cc, a 2019 flood mitigation), and a write is in progress
 * until the kernel has taken every byte of it. One write carries everything nghttp2 has ready,
 * up to the peer's flow-control windows: with our 16 MiB stream windows, many MiB. When both ends
 * of a session are node (our client SDK or agent, and our server) and both have more to send than
 * the socket buffers between them hold, each waits for the other to read, neither reads again,
 * and the session hangs for good (even `session.destroy()` waits for the write before it closes
 * the socket).
 *
 * Given this Duplex instead of the socket, node wraps it in a JS stream socket whose writes
 * complete once the socket has queued the bytes (in user space), so the client side of every
 * tunnel session keeps reading: the server's write drains, the server reads again, and what we
 * queued flows. What can queue here is bounded by the peer's flow-control window (DATA) plus
 * small control frames; past {@link TRANSPORT_HOLD_BYTES} a write completes only on "drain" (node's
 * own behaviour), so a peer that stops reading cannot make us buffer without bound.
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
    socket.on("end", () => this.push(null));
    socket.on("drain", () => this.release());
    socket.on("error", (err) => this.destroy(err));
    socket.on("close", () => this.destroy());
  }

  override _read(): void {
    this.socket.resume();
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

  private release(err?: Error | null): void {
    const callback = this.held;
    this.held = undefined;
    callback?.(err);
  }
}
