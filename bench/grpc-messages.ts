/**
 * gRPC length-prefixed messages for the plain Node.js floors (relay-floor.ts, gateway-floor.ts),
 * written without our tunnel's framing code: `[compressed:1][length:4 BE][message]`.
 */
import type { Http2Stream } from "node:http2";

/** One gRPC message: 0 (not compressed), 4-byte big-endian length, the bytes. */
export function frame(body: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}

/** Calls `onMessage` with each whole gRPC message (its body, and the framed bytes) read from `stream`. */
export function readMessages(stream: Http2Stream, onMessage: (body: Buffer, framed: Buffer) => void): void {
  let buffered: Buffer = Buffer.alloc(0);
  stream.on("data", (chunk: Buffer) => {
    buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
    while (buffered.length >= 5) {
      const len = buffered.readUInt32BE(1);
      if (buffered.length < 5 + len) break;
      onMessage(buffered.subarray(5, 5 + len), buffered.subarray(0, 5 + len));
      buffered = buffered.subarray(5 + len);
    }
  });
}
