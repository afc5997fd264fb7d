/**
 * A minimal gRPC server for bidi streams of raw frames on a node:http2 server. Only what the
 * konnectivity services need: path routing, metadata, immediate response headers, trailers.
 */
import * as http2 from "node:http2";
import type { TLSSocket } from "node:tls";
import { GrpcStream } from "./stream.js";
import { GrpcStatus, encodeGrpcMessage, type StreamStatus } from "./status.js";

const { HTTP2_HEADER_STATUS, HTTP2_HEADER_CONTENT_TYPE, HTTP2_HEADER_PATH, HTTP2_HEADER_METHOD } = http2.constants;

/** A server-side stream: request metadata in, response metadata, frames and a final status out. */
export class ServerCall extends GrpcStream {
  private headersSent = false;

  constructor(
    stream: http2.ServerHttp2Stream,
    readonly metadata: http2.IncomingHttpHeaders,
    maxMessageBytes: number,
  ) {
    super(stream, maxMessageBytes);
    stream.on("close", () =>
      this.settle({ code: GrpcStatus.CANCELLED, details: `stream closed by peer (code ${stream.rstCode})` }),
    );
  }

  /** All values of a metadata key (lower-case). */
  metadataValues(key: string): string[] {
    const v = this.metadata[key];
    if (v === undefined) return [];
    // node joins repeated custom headers with ", "
    return Array.isArray(v) ? v : String(v).split(", ");
  }

  /** The TLS socket of the call's connection, if any (for the peer certificate). */
  get tlsSocket(): TLSSocket | undefined {
    const socket = this.http2Stream.session?.socket as TLSSocket | undefined;
    // session.socket is a Proxy over the session whose `get` forwards to the socket but which has
    // no `has` trap, so `"getPeerCertificate" in socket` is always false: read the property.
    return socket && typeof socket.getPeerCertificate === "function" ? socket : undefined;
  }

  /**
   * Whether the HTTP/2 stream can take no more frames: destroyed, or closed (reset by the peer,
   * or its session gone) before node destroys it. node throws from `respond` in both states, and
   * a peer reaches them at will (issue 25: the "end" of a stream whose session was just
   * destroyed arrives after the stream closed), so every response path checks this first.
   */
  private get streamGone(): boolean {
    return this.http2Stream.destroyed || this.http2Stream.closed;
  }

  /** Send response headers now (flushes before any message, as Go agents expect). */
  sendHeaders(metadata: Record<string, string> = {}): void {
    if (this.headersSent || this.closed || this.streamGone) return;
    this.headersSent = true;
    (this.http2Stream as http2.ServerHttp2Stream).respond(
      { [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", ...metadata },
      { waitForTrailers: true },
    );
  }

  override send(frame: Buffer): boolean {
    if (this.streamGone) return false;
    if (!this.headersSent) this.sendHeaders();
    return super.send(frame);
  }

  override sendControl(frame: Buffer): boolean {
    if (!this.headersSent) this.sendHeaders();
    return super.sendControl(frame);
  }

  /** End the call with a status (trailers; a trailers-only response if nothing was sent). */
  finish(status: StreamStatus): void {
    if (this.closed) return;
    const stream = this.http2Stream as http2.ServerHttp2Stream;
    const trailers = { "grpc-status": String(status.code), "grpc-message": encodeGrpcMessage(status.details) };
    this.settle(status);
    if (this.streamGone) return;
    if (!this.headersSent) {
      this.headersSent = true;
      stream.respond(
        { [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", ...trailers },
        { endStream: true },
      );
      return;
    }
    // The client resets its side once it has the status (grpc-go and our client do); an RST
    // from here right after the trailers could overtake them.
    stream.once("wantTrailers", () => stream.sendTrailers(trailers));
    stream.end();
  }

  abort(status: StreamStatus): void {
    this.finish(status);
  }
}

export type GrpcHandler = (call: ServerCall) => void;

export interface GrpcRouterOptions {
  /** Largest message accepted (default 4 MiB, like grpc-go). */
  maxMessageBytes?: number;
}

/**
 * Route gRPC calls arriving on `server` to `handlers` by method path. Requests that are not
 * gRPC get HTTP 415; unknown methods get UNIMPLEMENTED.
 */
export function serveGrpc(
  server: http2.Http2Server | http2.Http2SecureServer,
  handlers: Record<string, GrpcHandler>,
  options: GrpcRouterOptions = {},
): void {
  const maxMessageBytes = options.maxMessageBytes ?? 4 * 1024 * 1024;
  server.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
    stream.on("error", () => {
      /* peer resets are normal; calls report them through "close" */
    });
    const contentType = String(headers[HTTP2_HEADER_CONTENT_TYPE] ?? "");
    if (headers[HTTP2_HEADER_METHOD] !== "POST" || !contentType.startsWith("application/grpc")) {
      stream.respond({ [HTTP2_HEADER_STATUS]: 415, "content-type": "text/plain" });
      stream.end("this port only serves gRPC\n");
      return;
    }
    const path = String(headers[HTTP2_HEADER_PATH] ?? "");
    const handler = Object.hasOwn(handlers, path) ? handlers[path] : undefined;
    const call = new ServerCall(stream, headers, maxMessageBytes);
    if (!handler) {
      call.finish({ code: GrpcStatus.UNIMPLEMENTED, details: `unknown method ${path}` });
      return;
    }
    handler(call);
  });
}
