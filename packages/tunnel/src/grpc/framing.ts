/**
 * gRPC length-prefixed message framing: `[compressed:1][length:4 BE][message]`.
 *
 * Messages are exchanged as *frames* (prefix included) so a relay can forward a received frame
 * without copying, and so encoders can write their message after 5 bytes of headroom.
 */

/** Bytes of the gRPC message prefix. */
export const FRAME_HEADER = 5;

/** Fill the 5-byte prefix of `frame` (which holds the message after {@link FRAME_HEADER} bytes). */
export function sealFrame(frame: Buffer): Buffer {
  frame[0] = 0;
  frame.writeUInt32BE(frame.length - FRAME_HEADER, 1);
  return frame;
}

/** Wrap a message into a new frame (one copy). */
export function frameMessage(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER + message.length);
  frame.set(message, FRAME_HEADER);
  return sealFrame(frame);
}

/** Raised when the peer sends a frame we refuse (too large, compressed). */
export class FrameError extends Error {
  constructor(
    message: string,
    readonly grpcStatus: number,
  ) {
    super(message);
    this.name = "FrameError";
  }
}

/**
 * Incremental frame parser. Feed it HTTP/2 DATA chunks; it calls `onFrame` once per complete
 * frame. A frame wholly inside one chunk is a view of that chunk (no copy).
 */
export class FrameDecoder {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private need = FRAME_HEADER; // bytes needed to make progress
  private frameLen = -1; // total length of the frame being assembled, -1 while reading the header

  constructor(
    private readonly maxMessageBytes: number,
    private readonly onFrame: (frame: Buffer) => void,
  ) {}

  /** Consume one chunk. Throws {@link FrameError} on a frame the decoder refuses. */
  push(chunk: Buffer): void {
    if (this.pendingBytes === 0) {
      let pos = 0;
      while (chunk.length - pos >= FRAME_HEADER) {
        const len = this.checkHeader(chunk, pos);
        const end = pos + FRAME_HEADER + len;
        if (end > chunk.length) break;
        this.onFrame(chunk.subarray(pos, end));
        pos = end;
      }
      if (pos < chunk.length) this.stash(chunk.subarray(pos));
      return;
    }
    this.stash(chunk);
  }

  private checkHeader(buf: Buffer, pos: number): number {
    if (buf[pos] !== 0) throw new FrameError("compressed gRPC messages are not supported", 12 /* UNIMPLEMENTED */);
    const len = buf.readUInt32BE(pos + 1);
    if (len > this.maxMessageBytes) {
      throw new FrameError(
        `gRPC message of ${len} bytes exceeds the limit of ${this.maxMessageBytes}`,
        8 /* RESOURCE_EXHAUSTED */,
      );
    }
    return len;
  }

  private stash(part: Buffer): void {
    this.pending.push(part);
    this.pendingBytes += part.length;
    while (this.pendingBytes >= this.need) {
      const all = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
      this.pending = [];
      this.pendingBytes = 0;
      if (this.frameLen < 0) {
        this.frameLen = FRAME_HEADER + this.checkHeader(all, 0);
        this.need = this.frameLen;
        this.pending = [all];
        this.pendingBytes = all.length;
        continue;
      }
      const frame = all.subarray(0, this.frameLen);
      const rest = all.subarray(this.frameLen);
      this.frameLen = -1;
      this.need = FRAME_HEADER;
      this.onFrame(frame);
      if (rest.length > 0) this.push(rest);
      return;
    }
  }
}
