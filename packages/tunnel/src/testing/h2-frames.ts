/**
 * Raw HTTP/2 frames for the hostile-client suite: what a misbehaving client puts on the wire,
 * byte by byte, where node:http2's client would refuse to (oversized frames, huge header blocks,
 * HEADERS + RST_STREAM floods). Only what the attacks need: no HPACK beyond literal fields.
 */

/** The client connection preface. */
export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  CONTINUATION: 0x9,
} as const;

export const Flags = { END_STREAM: 0x1, END_HEADERS: 0x4 } as const;

/** A frame: 9-byte header (`length` may lie about the payload, for the oversized-header attack). */
export function frame(type: number, flags: number, streamId: number, payload: Buffer, length = payload.length): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** An HPACK integer with an `prefixBits`-bit prefix whose high bits are `pattern`. */
function hpackInt(value: number, prefixBits: number, pattern: number): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([pattern | value]);
  const out = [pattern | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest & 0x7f) | 0x80);
    rest >>= 7;
  }
  out.push(rest);
  return Buffer.from(out);
}

/** A literal header field without indexing (new name), no Huffman coding. */
export function literalField(name: string, value: string | Buffer): Buffer {
  const n = Buffer.from(name, "latin1");
  const v = typeof value === "string" ? Buffer.from(value, "latin1") : value;
  return Buffer.concat([Buffer.from([0x00]), hpackInt(n.length, 7, 0), n, hpackInt(v.length, 7, 0), v]);
}

/** The header block of a gRPC call to `path` (plus `extra` fields). */
export function grpcRequestBlock(path: string, extra: Buffer[] = []): Buffer {
  return Buffer.concat([
    literalField(":method", "POST"),
    literalField(":scheme", "https"),
    literalField(":path", path),
    literalField(":authority", "localhost"),
    literalField("content-type", "application/grpc"),
    literalField("te", "trailers"),
    ...extra,
  ]);
}

/** The preface and an empty SETTINGS frame: what a client sends before anything else. */
export function clientStart(): Buffer {
  return Buffer.concat([PREFACE, frame(FrameType.SETTINGS, 0, 0, Buffer.alloc(0))]);
}

/** HEADERS opening stream `id` on `path` (END_HEADERS, stream left open). */
export function openStream(id: number, path: string): Buffer {
  return frame(FrameType.HEADERS, Flags.END_HEADERS, id, grpcRequestBlock(path));
}

/** RST_STREAM CANCEL (8) for stream `id`. */
export function resetStream(id: number): Buffer {
  const code = Buffer.alloc(4);
  code.writeUInt32BE(8);
  return frame(FrameType.RST_STREAM, 0, id, code);
}

/** A header block of about `bytes` spread over HEADERS + CONTINUATION frames of 16 KiB. */
export function hugeHeaderBlock(id: number, path: string, bytes: number): Buffer {
  const filler: Buffer[] = [];
  for (let i = 0; i * 4096 < bytes; i++) filler.push(literalField(`x-filler-${i}`, Buffer.alloc(4000, 0x61)));
  const block = grpcRequestBlock(path, filler);
  const frames: Buffer[] = [];
  const max = 16 * 1024;
  for (let off = 0; off < block.length; off += max) {
    const last = off + max >= block.length;
    const part = block.subarray(off, off + max);
    frames.push(frame(off === 0 ? FrameType.HEADERS : FrameType.CONTINUATION, last ? Flags.END_HEADERS : 0, id, part));
  }
  return Buffer.concat(frames);
}

/** A DATA frame header on stream 1 that announces `length` bytes (beyond any max frame size). */
export function oversizedFrameHeader(length = 0xffffff): Buffer {
  return frame(FrameType.DATA, 0, 1, Buffer.alloc(0), length);
}
