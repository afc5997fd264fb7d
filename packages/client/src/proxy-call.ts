/**
 * The life of one `/ProxyService/Proxy` call as the client drives it: the dial's random id and
 * the orderly end of the call (the Go server never ends a Proxy RPC by itself, so we must).
 */
import { randomBytes } from "node:crypto";
import { decodePacket, type Packet } from "@cluster-proxy/protocol";
import { FRAME_HEADER, GrpcStatus, type ClientCall } from "@cluster-proxy/tunnel";

/** How long a call may take to flush what we wrote before we reset it anyway. */
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
 * End a Proxy call from our side: half-close once everything we wrote is flushed, then reset
 * the stream (RST_STREAM CANCEL, like Go closing its ClientConn) and call `done` once.
 */
export function finishProxyCall(call: ClientCall, done: () => void): void {
  let finished = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    stream.off("finish", finish);
    stream.off("close", finish);
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
  call.end();
  if (stream.destroyed || stream.writableFinished) {
    finish();
    return;
  }
  stream.once("finish", finish);
  stream.once("close", finish);
}
