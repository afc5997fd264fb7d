/**
 * Test-only: a hand-written HTTP/2 client over TLS that says only what a test tells it to (no flow
 * control, no answers but the SETTINGS acknowledgement): to idle, or to send streams and reset
 * them faster than any real client would.
 */
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const SETTINGS = 0x4;
const HEADERS = 0x1;
const RST_STREAM = 0x3;
const GOAWAY = 0x7;

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** An HPACK string (no Huffman coding) of fewer than 127 bytes. */
function hpackString(s: string): Buffer {
  const b = Buffer.from(s);
  if (b.length >= 127) throw new Error("header too long for this encoder");
  return Buffer.concat([Buffer.from([b.length]), b]);
}

/** A header block: GET `path` over https at `localhost`, with the other headers literal. */
function headerBlock(path: string, headers: Record<string, string>): Buffer {
  const parts = [
    Buffer.from([0x82, 0x87]), // :method GET, :scheme https (static table)
    Buffer.from([0x04]), // :path, literal value without indexing
    hpackString(path),
    Buffer.from([0x01]), // :authority, literal value without indexing
    hpackString("localhost"),
  ];
  for (const [name, value] of Object.entries(headers))
    parts.push(Buffer.from([0x00]), hpackString(name), hpackString(value));
  return Buffer.concat(parts);
}

/** A raw HTTP/2 connection; see the module comment. */
export class RawH2 {
  /** The error codes of the GOAWAY frames the server sent, in order. */
  readonly goaways: number[] = [];
  private nextStream = 1;
  private inbound = Buffer.alloc(0);

  private constructor(readonly socket: tls.TLSSocket) {
    socket.on("error", () => undefined);
    socket.on("data", (chunk: Buffer) => this.read(chunk));
  }

  /** Connect, say the preface and empty SETTINGS, and nothing more. */
  static async connect(port: number, ca: Buffer, localAddress?: string): Promise<RawH2> {
    const socket = tls.connect({
      socket: net.connect({ host: "127.0.0.1", port, ...(localAddress ? { localAddress } : {}) }),
      ca,
      servername: "localhost",
      ALPNProtocols: ["h2"],
    });
    await once(socket, "secureConnect");
    if (socket.alpnProtocol !== "h2") throw new Error(`ALPN chose ${String(socket.alpnProtocol)}`);
    socket.write(Buffer.concat([PREFACE, frame(SETTINGS, 0, 0, Buffer.alloc(0))]));
    return new RawH2(socket);
  }

  private read(chunk: Buffer): void {
    this.inbound = Buffer.concat([this.inbound, chunk]);
    while (this.inbound.length >= 9) {
      const length = this.inbound.readUIntBE(0, 3);
      if (this.inbound.length < 9 + length) return;
      const type = this.inbound[3];
      const flags = this.inbound[4]!;
      const payload = this.inbound.subarray(9, 9 + length);
      if (type === SETTINGS && (flags & 0x1) === 0 && this.socket.writable)
        this.socket.write(frame(SETTINGS, 0x1, 0, Buffer.alloc(0)));
      if (type === GOAWAY && payload.length >= 8) this.goaways.push(payload.readUInt32BE(4));
      this.inbound = this.inbound.subarray(9 + length);
    }
  }

  /**
   * Open `count` streams (GET `path` with `headers`), each reset (CANCEL) right after its
   * HEADERS, in writes of `batch` pairs; stops early when the connection closes. Resolves with
   * the streams sent. `code`: the RST_STREAM error code (default CANCEL).
   */
  async rapidReset(
    count: number,
    path: string,
    headers: Record<string, string>,
    batch = 100,
    code = 0x8,
  ): Promise<number> {
    const block = headerBlock(path, headers);
    const cancel = Buffer.alloc(4);
    cancel.writeUInt32BE(code);
    let sent = 0;
    while (sent < count && this.socket.writable) {
      const frames: Buffer[] = [];
      for (let i = 0; i < batch && sent < count; i++, sent++) {
        const id = this.nextStream;
        this.nextStream += 2;
        frames.push(frame(HEADERS, 0x5, id, block), frame(RST_STREAM, 0, id, cancel));
      }
      if (!this.socket.write(Buffer.concat(frames)))
        await Promise.race([once(this.socket, "drain"), once(this.socket, "close")]);
      await new Promise((r) => setImmediate(r));
    }
    return sent;
  }

  /** Open `count` streams (GET `path` with `headers`) and leave them open. */
  open(count: number, path: string, headers: Record<string, string>): void {
    const block = headerBlock(path, headers);
    const frames: Buffer[] = [];
    for (let i = 0; i < count; i++, this.nextStream += 2) frames.push(frame(HEADERS, 0x5, this.nextStream, block));
    this.socket.write(Buffer.concat(frames));
  }

  /** Resolves when the connection is closed. */
  closed(): Promise<void> {
    return this.socket.destroyed && this.socket.closed
      ? Promise.resolve()
      : once(this.socket, "close").then(() => undefined);
  }

  destroy(): void {
    this.socket.destroy();
  }
}
