/**
 * A minimal gRPC client for bidi streams of raw frames over one node:http2 session.
 * A channel keeps one session; each `openStream` is one HTTP/2 stream (no handshake per call).
 */
import * as http2 from "node:http2";
import { GrpcStream } from "./stream.js";
import { ConnectError, sessionFailure } from "./session.js";
import { GrpcStatus, decodeGrpcMessage, type StreamStatus } from "./status.js";

const { NGHTTP2_CANCEL } = http2.constants;

function statusFrom(headers: http2.IncomingHttpHeaders): StreamStatus | undefined {
  const code = headers["grpc-status"];
  if (code === undefined) return undefined;
  return { code: Number(code), details: decodeGrpcMessage(String(headers["grpc-message"] ?? "")) };
}

/** A client-side stream. "headers" fires with the server's response metadata. */
export class ClientCall extends GrpcStream {
  private status: StreamStatus | undefined;
  /** Response headers, once received. */
  responseHeaders: http2.IncomingHttpHeaders | undefined;

  constructor(stream: http2.ClientHttp2Stream, maxMessageBytes: number) {
    super(stream, maxMessageBytes);
    const session = stream.session;
    stream.on("response", (headers) => {
      this.responseHeaders = headers;
      const httpStatus = Number(headers[":status"]);
      this.status = statusFrom(headers);
      if (httpStatus !== 200 && !this.status) {
        this.status = { code: GrpcStatus.UNKNOWN, details: `unexpected HTTP status ${httpStatus}` };
      }
      this.emit("headers", headers);
    });
    stream.on("trailers", (headers: http2.IncomingHttpHeaders) => {
      this.status = statusFrom(headers) ?? this.status;
    });
    // The server's status is final once every message before it was read: settle then, and
    // reset our side if we were still sending (a server may finish while we have not). Once we
    // half-closed too, the stream ends by itself: no reset (see `abort`).
    stream.on("end", () => {
      if (!this.status) return;
      this.settle(this.status);
      if (!stream.destroyed && !stream.writableEnded) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    });
    stream.on("close", () => {
      const failure = sessionFailure(session);
      if (this.status) this.settle(this.status);
      else if (failure) this.settle({ code: GrpcStatus.UNAVAILABLE, details: failure });
      else if (stream.rstCode === NGHTTP2_CANCEL) this.settle({ code: GrpcStatus.CANCELLED, details: "cancelled" });
      else
        this.settle({
          code: GrpcStatus.UNAVAILABLE,
          details: stream.rstCode ? `stream reset (HTTP/2 code ${stream.rstCode})` : "connection closed",
        });
    });
  }

  /** Resolve with the response headers, or reject with a {@link ConnectError} if the call ends first. */
  waitForHeaders(): Promise<http2.IncomingHttpHeaders> {
    if (this.responseHeaders) return Promise.resolve(this.responseHeaders);
    return new Promise((resolve, reject) => {
      const onHeaders = (h: http2.IncomingHttpHeaders): void => {
        this.off("close", onClose);
        resolve(h);
      };
      const onClose = (s: StreamStatus): void => {
        this.off("headers", onHeaders);
        reject(new ConnectError(s.details || `stream closed with status ${s.code}`));
      };
      this.once("headers", onHeaders);
      this.once("close", onClose);
    });
  }

  /** Half-close: we send no more messages. */
  end(): void {
    if (!this.http2Stream.writableEnded) this.http2Stream.end();
  }

  abort(status: StreamStatus): void {
    this.status ??= status;
    const stream = this.http2Stream;
    // A stream ended both ways (END_STREAM sent and received) is over even if nghttp2 has not
    // reported its close yet: a RST_STREAM then is needless, and a Node server counts every one
    // it receives against its reset rate limit (nghttp2 >= 1.57: a burst of ~1,000, then 33/s;
    // beyond it, GOAWAY INTERNAL_ERROR ends the whole session).
    if (!stream.destroyed && !(stream.readableEnded && stream.writableFinished)) stream.close(NGHTTP2_CANCEL);
    this.settle(this.status);
  }
}

export interface OpenStreamOptions {
  metadata?: Record<string, string>;
  maxMessageBytes?: number;
}

/** Open a gRPC bidi call on an established session. */
export function openCall(
  session: http2.ClientHttp2Session,
  method: string,
  options: OpenStreamOptions = {},
): ClientCall {
  const stream = session.request(
    {
      ":method": "POST",
      ":path": method,
      "content-type": "application/grpc",
      te: "trailers",
      "user-agent": "cluster-proxy/0.1",
      ...options.metadata,
    },
    { endStream: false },
  );
  return new ClientCall(stream, options.maxMessageBytes ?? 4 * 1024 * 1024);
}
