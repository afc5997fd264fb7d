/**
 * A TLS port that answers plain HTTP with a 400 naming its flag, at once, as Go's net/http does
 * ("Client sent an HTTP request to an HTTPS server"), instead of an empty reply after a failed
 * handshake. The proxy-server's TLS ports do this in their handshake pacer; the ports without one
 * (the gateway's, the mTLS CONNECT door of `cluster-proxy up`) put {@link guardPlainHttp} in front.
 */
import * as net from "node:net";
import type * as tls from "node:tls";

/** How long a refused client may take to read the 400 before its socket is closed. */
const ANSWER_LINGER_MS = 2_000;

/** The answer of a TLS port to a plain HTTP request, naming the port's flag. */
export function plainHttpOnTlsPortResponse(flag: string): Buffer {
  const body = Buffer.from(`Client sent an HTTP request to an HTTPS server: this port (${flag}) speaks TLS.\n`);
  return Buffer.concat([
    Buffer.from(
      `HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n` +
        `X-Content-Type-Options: nosniff\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
      "latin1",
    ),
    body,
  ]);
}

/** Whether a connection's first bytes are an HTTP request line (an upper-case method), not TLS. */
export function startsLikeHttp(bytes: Buffer): boolean {
  const first = bytes[0];
  return first !== undefined && first >= 0x41 && first <= 0x5a;
}

export interface PlainHttpGuardOptions {
  /** The flag of the port, named in the answer. */
  flag: string;
  /**
   * A connection must have sent its first bytes this long after it was accepted, else it is
   * closed (ms): the TLS server's own handshake timeout starts only once it has them.
   */
  firstBytesTimeoutMs: number;
}

/**
 * A listener for `tlsServer`: every accepted connection's first bytes are read here; plain HTTP
 * gets the 400 of {@link plainHttpOnTlsPortResponse}, anything else goes to `tlsServer` unread
 * (its `connection` event, as if it had accepted it). Listen on the returned server, not on
 * `tlsServer`; `tlsServer.close()` is still what stops its connections. Its `close()` also closes
 * the connections that have not sent their first bytes yet.
 */
export function guardPlainHttp(tlsServer: tls.Server, options: PlainHttpGuardOptions): net.Server {
  return new PlainHttpGuard(tlsServer, options);
}

class PlainHttpGuard extends net.Server {
  /** Connections whose first bytes have not arrived yet. */
  private readonly pending = new Set<net.Socket>();

  constructor(tlsServer: tls.Server, options: PlainHttpGuardOptions) {
    const answer = plainHttpOnTlsPortResponse(options.flag);
    super({ pauseOnConnect: true }, (socket) => {
      this.pending.add(socket);
      socket.on("error", () => socket.destroy());
      const timer = setTimeout(() => socket.destroy(), options.firstBytesTimeoutMs);
      timer.unref();
      socket.once("close", () => {
        clearTimeout(timer);
        this.pending.delete(socket);
      });
      socket.once("data", (chunk: Buffer) => {
        clearTimeout(timer);
        this.pending.delete(socket);
        socket.pause();
        if (startsLikeHttp(chunk)) {
          socket.end(answer);
          setTimeout(() => socket.destroy(), ANSWER_LINGER_MS).unref();
          return;
        }
        socket.unshift(chunk);
        tlsServer.emit("connection", socket);
      });
      socket.resume();
    });
  }

  override close(callback?: (err?: Error) => void): this {
    for (const s of this.pending) s.destroy();
    return super.close(callback);
  }
}
