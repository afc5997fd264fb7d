/**
 * Callers of the gateway's hostile suite: bytes written by hand on a TLS socket (HTTP/1.1), a
 * node:http2 client, and raw HTTP/2 frames where node refuses to send the malformed thing. Every
 * exchange is bounded in time and resolves (never rejects) with what the caller saw.
 */
import * as http2 from "node:http2";
import * as https from "node:https";
import * as tls from "node:tls";
import { rawH2 } from "@cluster-proxy/tunnel/testing";
import { gatewayRequestOptions, type HostileWorld } from "./hostile-world.js";
import { errorMessage } from "@cluster-proxy/errors";

/** What an HTTP/1.1 caller read before the gateway closed the connection (or the time ran out). */
export interface RawAnswer {
  /** Every byte read, as latin1. */
  text: string;
  /** The status code of each response head read (`HTTP/1.x NNN` at a line start). */
  statuses: number[];
  /** How it ended: the gateway closed, an error, or the time ran out (then the socket is destroyed). */
  end: "close" | "error" | "timeout";
}

function tlsTo(world: HostileWorld, alpn: string): tls.TLSSocket {
  return tls.connect({
    host: "127.0.0.1",
    port: world.port,
    ca: world.servingCa,
    servername: "localhost",
    ALPNProtocols: [alpn],
  });
}

/** Writes `bytes` on a fresh HTTP/1.1 TLS connection and reads until the gateway closes it (at most `timeoutMs`). */
export async function rawHttp1(world: HostileWorld, bytes: Buffer | string, timeoutMs = 5_000): Promise<RawAnswer> {
  const socket = tlsTo(world, "http/1.1");
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  const end = await new Promise<RawAnswer["end"]>((resolve) => {
    const timer = setTimeout(() => resolve("timeout"), timeoutMs);
    socket.once("secureConnect", () => socket.write(bytes));
    socket.once("close", () => {
      clearTimeout(timer);
      resolve("close");
    });
    socket.once("error", () => {
      clearTimeout(timer);
      resolve("error");
    });
  });
  socket.destroy();
  const text = Buffer.concat(chunks).toString("latin1");
  const statuses = [...text.matchAll(/(?:^|\r?\n)HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
  return { text, statuses, end };
}

/** What an HTTP/2 caller saw on its stream. */
export interface H2Answer {
  status?: number;
  body: string;
  /** The stream's close code when it was reset (0 when it ended cleanly). */
  rstCode?: number;
  /** An error of the session or stream (a refused send included), or a timeout. */
  error?: string;
}

/** One HTTP/2 request to send: headers as given, `body` chunks written as DATA (stream ended after unless `endStream` is false). */
export interface H2Request {
  headers: http2.OutgoingHttpHeaders;
  body?: (Buffer | string)[];
  endStream?: boolean;
}

/** Sends `r` on `session` and resolves with what came back (within `timeoutMs`). */
function onStream(session: http2.ClientHttp2Session, r: H2Request, timeoutMs: number): Promise<H2Answer> {
  const body = r.body ?? [];
  const answer: H2Answer = { body: "" };
  return new Promise<H2Answer>((resolve) => {
    const timer = setTimeout(() => {
      answer.error = "timeout";
      resolve(answer);
    }, timeoutMs);
    const done = (): void => {
      clearTimeout(timer);
      resolve(answer);
    };
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request(r.headers, { endStream: body.length === 0 && r.endStream !== false });
    } catch (err) {
      answer.error = errorMessage(err);
      return done();
    }
    stream.on("response", (h) => (answer.status = Number(h[":status"])));
    stream.on("data", (c: Buffer) => (answer.body += c.toString("latin1")));
    stream.on("error", (err: Error) => (answer.error = err.message));
    stream.on("close", () => {
      answer.rstCode = stream.rstCode;
      done();
    });
    try {
      for (const chunk of body) stream.write(chunk);
      if (body.length > 0 && r.endStream !== false) stream.end();
    } catch (err) {
      answer.error = errorMessage(err);
      stream.close(http2.constants.NGHTTP2_CANCEL);
    }
  });
}

/** An HTTP/2 connection to the world's gateway (with client certificate `cert`, if given); its errors are the caller's to read off its streams. */
export function gatewaySession(world: HostileWorld, cert?: { cert: Buffer; key: Buffer }): http2.ClientHttp2Session {
  const session = http2.connect(`https://127.0.0.1:${world.port}`, {
    ca: world.servingCa,
    servername: "localhost",
    ...(cert ?? {}),
  });
  session.on("error", () => undefined);
  return session;
}

/** Sends every request of `requests` at once as streams of one HTTP/2 connection; resolves with their answers in order. */
export async function http2Calls(world: HostileWorld, requests: H2Request[], timeoutMs = 5_000): Promise<H2Answer[]> {
  const session = gatewaySession(world);
  try {
    return await Promise.all(requests.map((r) => onStream(session, r, timeoutMs)));
  } finally {
    session.destroy();
  }
}

/** One HTTP/2 request with node's client on a connection of its own (see {@link H2Request}). */
export async function http2Call(
  world: HostileWorld,
  headers: http2.OutgoingHttpHeaders,
  body: (Buffer | string)[] = [],
  opts: { timeoutMs?: number; endStream?: boolean } = {},
): Promise<H2Answer> {
  const request: H2Request = { headers, body, ...(opts.endStream !== undefined ? { endStream: opts.endStream } : {}) };
  const [answer] = await http2Calls(world, [request], opts.timeoutMs ?? 5_000);
  return answer ?? { body: "", error: "no answer" };
}

/** What a raw HTTP/2 caller read back: the frame types per stream, RST_STREAM codes, GOAWAY. */
export interface RawH2Answer {
  /** Stream 1 got a HEADERS frame (a response head). */
  headers: boolean;
  /** Its `:status`, when the first field of the block could be read (0 otherwise). */
  status: number;
  /** The RST_STREAM code on stream 1, if reset. */
  rstCode?: number;
  goaway: boolean;
  end: "close" | "error" | "timeout" | "answered";
}

/** HPACK static-table entries 8-14: `:status` 200, 204, 206, 304, 400, 404, 500. */
const STATIC_STATUS = [200, 204, 206, 304, 400, 404, 500];
/** HPACK Huffman codes of the digits (RFC 7541 appendix B): [code, bits]. */
const DIGIT_CODES: [number, number][] = [
  [0x0, 5],
  [0x1, 5],
  [0x2, 5],
  [0x19, 6],
  [0x1a, 6],
  [0x1b, 6],
  [0x1c, 6],
  [0x1d, 6],
  [0x1e, 6],
  [0x1f, 6],
];

/** Reads three Huffman-coded digits from `bytes` (0 when they are not digits). */
function huffmanDigits(bytes: Buffer): number {
  let bits = 0n;
  for (const b of bytes) bits = (bits << 8n) | BigInt(b);
  let left = bytes.length * 8;
  let out = "";
  while (out.length < 3) {
    const hit = DIGIT_CODES.findIndex(
      ([code, n]) => n <= left && Number((bits >> BigInt(left - n)) & ((1n << BigInt(n)) - 1n)) === code,
    );
    if (hit < 0) return 0;
    out += String(hit);
    left -= DIGIT_CODES[hit]![1];
  }
  return Number(out);
}

/**
 * The `:status` of a response header block when it is its first field (as node and nghttp2 send
 * it): an indexed static entry or a literal with the static `:status` name; 0 otherwise.
 */
export function statusOfBlock(block: Buffer): number {
  const first = block[0] ?? 0;
  if (first >= 0x88 && first <= 0x8e) return STATIC_STATUS[first - 0x88] ?? 0;
  // Literal with incremental indexing (01xxxxxx), without indexing (0000xxxx) or never indexed (0001xxxx), name index 8..14.
  const nameIndex = (first & 0xc0) === 0x40 ? first & 0x3f : first & 0x0f;
  if (nameIndex < 8 || nameIndex > 14 || (first & 0x80) !== 0) return 0;
  const lenByte = block[1] ?? 0;
  const value = block.subarray(2, 2 + (lenByte & 0x7f));
  return lenByte & 0x80 ? huffmanDigits(value) : Number(value.toString("latin1")) || 0;
}

/** A literal header field list (name, value) as an HPACK block without indexing or Huffman. */
export function headerBlock(fields: readonly (readonly [string, string | Buffer])[]): Buffer {
  return Buffer.concat(fields.map(([n, v]) => rawH2.literalField(n, v)));
}

/**
 * Opens stream 1 with `block` (END_HEADERS; END_STREAM when `data` is empty), then sends each of
 * `data` as a DATA frame (the last with END_STREAM), and reads frames until stream 1 is answered
 * (HEADERS, RST_STREAM or GOAWAY), the connection closes, or `timeoutMs` passes.
 */
export async function rawHttp2(
  world: HostileWorld,
  block: Buffer,
  data: Buffer[] = [],
  timeoutMs = 5_000,
): Promise<RawH2Answer> {
  const socket = tlsTo(world, "h2");
  socket.on("error", () => undefined);
  const answer: RawH2Answer = { headers: false, status: 0, goaway: false, end: "timeout" };
  let buf = Buffer.alloc(0);
  const { FrameType, Flags, frame, clientStart } = rawH2;
  const settingsAck = frame(FrameType.SETTINGS, 0x1, 0, Buffer.alloc(0));
  answer.end = await new Promise<RawH2Answer["end"]>((resolve) => {
    const timer = setTimeout(() => resolve("timeout"), timeoutMs);
    const finish = (how: RawH2Answer["end"]): void => {
      clearTimeout(timer);
      resolve(how);
    };
    socket.on("data", (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3);
        if (buf.length < 9 + len) break;
        const type = buf[3];
        const flags = buf[4] ?? 0;
        const id = buf.readUInt32BE(5) & 0x7fffffff;
        const payload = buf.subarray(9, 9 + len);
        buf = buf.subarray(9 + len);
        if (type === FrameType.SETTINGS && (flags & 0x1) === 0) socket.write(settingsAck);
        if (type === 0x7) {
          answer.goaway = true;
          finish("answered");
        }
        if (id === 1 && type === FrameType.HEADERS) {
          answer.headers = true;
          answer.status = statusOfBlock(
            flags & 0x8 ? payload.subarray(1, payload.length - (payload[0] ?? 0)) : payload,
          );
          finish("answered");
        }
        if (id === 1 && type === FrameType.RST_STREAM) {
          answer.rstCode = payload.readUInt32BE(0);
          finish("answered");
        }
      }
    });
    socket.once("close", () => finish("close"));
    socket.once("error", () => finish("error"));
    socket.once("secureConnect", () => {
      const frames = [clientStart()];
      frames.push(frame(FrameType.HEADERS, Flags.END_HEADERS | (data.length === 0 ? Flags.END_STREAM : 0), 1, block));
      data.forEach((d, i) => frames.push(frame(FrameType.DATA, i === data.length - 1 ? Flags.END_STREAM : 0, 1, d)));
      socket.write(Buffer.concat(frames));
    });
  });
  socket.destroy();
  return answer;
}

/** A plain HTTPS GET through the gateway as `token` (the legitimate request checked after each attack). */
export function legitimateGet(
  world: HostileWorld,
  path: string,
  token: string,
  timeoutMs = 15_000,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      {
        ...gatewayRequestOptions(world, path, token),
        timeout: timeoutMs,
      },
      (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`GET ${path}: no answer within ${timeoutMs} ms`)));
    req.on("error", reject);
  });
}
