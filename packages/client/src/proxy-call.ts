/**
 * The life of one `/ProxyService/Proxy` call as the client drives it: the dial's random id and
 * the orderly end of the call (the Go server never ends a Proxy RPC by itself, so we must: it
 * ends it once we half-close, and so does ours).
 */
import { randomBytes } from "node:crypto";
import { decodePacket, type Packet } from "@cluster-proxy/protocol";
import { FRAME_HEADER, GrpcStatus, type ClientCall } from "@cluster-proxy/tunnel";

/** How long a call may take to flush what we wrote and be ended by the server before we reset it anyway. */
const FLUSH_LIMIT_MS = 10_000;

/**
 * A random dial id like Go's `rand.Int63()`: a non-negative int64, never 0 (0 is absent on the
 * wire). Values above 2^53 are normal, hence bigint.
 */
export function newDialRandom(): bigint {
  for (let i = 0; i < 8; i++) {
    const bytes = randomBytes(8);
    bytes[0] = bytes[0]! & 0x7f;
    const value = bytes.readBigUInt64BE(0);
    if (value !== 0n) return value;
  }
  return 1n; // eight zero draws in a row: the RNG is broken; any non-zero id still works
}

/** Decode the packet in a received gRPC frame. Throws PacketDecodeError on garbage. */
export function packetOfFrame(frame: Buffer): Packet {
  return decodePacket(frame.subarray(FRAME_HEADER));
}

/**
 * End a Proxy call from our side: half-close, then wait for the server to end the call (it does
 * once it has read our half-close: trailers) and call `done` once. Only a server that has not
 * ended it within {@link FLUSH_LIMIT_MS} gets a reset (RST_STREAM CANCEL).
 *
 * No reset on the normal path: a Node proxy server (nghttp2 >= 1.57, the HTTP/2 "rapid reset"
 * mitigation) answers more than ~1,000 RST_STREAMs in a burst (refilled at 33/s) with GOAWAY
 * INTERNAL_ERROR, killing every tunnel on the session; one reset per closed connection hits that
 * under dial churn.
 */
export function finishProxyCall(call: ClientCall, done: () => void): void {
  let finished = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    call.off("close", finish);
    // A no-op when the call is over (the stream is closed then: no RST_STREAM is sent).
    call.abort({ code: GrpcStatus.CANCELLED, details: "tunnel closed by the client" });
    done();
  };
  const stream = call.http2Stream;
  // A call the server already ended needs no half-close; and on Node 20, ending an HTTP/2
  // stream the peer has ended can make a later TLS session in the same process spin.
  if (call.closed || stream.destroyed || stream.readableEnded) {
    finished = true;
    call.abort({ code: GrpcStatus.CANCELLED, details: "tunnel closed by the client" });
    done();
    return;
  }
  const timer = setTimeout(finish, FLUSH_LIMIT_MS);
  timer.unref();
  call.once("close", finish);
  // Read on to the server's end of the call even if a paused socket stopped reading it.
  call.resume();
  call.end();
}
