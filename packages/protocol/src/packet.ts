/**
 * The konnectivity `Packet` message and its protobuf codec: hand-written for DATA and the canonical
 * layout, @bufbuild/protobuf for the rest; {@link peekPacket} reads only what a relay routes by.
 * Design: docs/design/protocol.md#12-messages-and-their-encoding
 */
import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { errorMessage, ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";

/** Packet types, numbered as in the konnectivity `PacketType` enum. */
export const PacketType = {
  DIAL_REQ: 0,
  DIAL_RSP: 1,
  CLOSE_REQ: 2,
  CLOSE_RSP: 3,
  DATA: 4,
  DIAL_CLS: 5,
  DRAIN: 6,
} as const;
export type PacketType = (typeof PacketType)[keyof typeof PacketType];

const TYPE_NAMES: Record<number, string> = {
  0: "DIAL_REQ",
  1: "DIAL_RSP",
  2: "CLOSE_REQ",
  3: "CLOSE_RSP",
  4: "DATA",
  5: "DIAL_CLS",
  6: "DRAIN",
};

/** The name of a packet type as konnectivity spells it (metric label values), or `UNKNOWN(n)`. */
export function packetTypeName(type: number): string {
  return TYPE_NAMES[type] ?? `UNKNOWN(${type})`;
}

export interface DialRequest {
  protocol: string;
  address: string;
  random: bigint;
}
export interface DialResponse {
  error: string;
  connectID: bigint;
  random: bigint;
}
export interface CloseRequest {
  connectID: bigint;
}
export interface CloseResponse {
  error: string;
  connectID: bigint;
}
export interface CloseDial {
  random: bigint;
}
export interface Data {
  connectID: bigint;
  error: string;
  data: Uint8Array;
}

/** A decoded konnectivity packet. The arm always matches `type`. */
export type Packet =
  | { type: typeof PacketType.DIAL_REQ; dialRequest: DialRequest }
  | { type: typeof PacketType.DIAL_RSP; dialResponse: DialResponse }
  | { type: typeof PacketType.CLOSE_REQ; closeRequest: CloseRequest }
  | { type: typeof PacketType.CLOSE_RSP; closeResponse: CloseResponse }
  | { type: typeof PacketType.DATA; data: Data }
  | { type: typeof PacketType.DIAL_CLS; closeDial: CloseDial }
  | { type: typeof PacketType.DRAIN }
  | { type: number; unknown: true };

/** Raised for bytes that are not a well-formed Packet. */
export class PacketDecodeError extends ClusterProxyError<typeof ErrorCodes.packetDecode> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.packetDecode, message, options);
    this.name = "PacketDecodeError";
  }
}

// Oneof field numbers, indexed by packet type.
const ARM_FIELD = [2, 3, 5, 6, 4, 7, 8] as const;

/** Encode a packet. `headroom` bytes are left free at the start of the returned buffer. */
export function encodePacket(packet: Packet, headroom = 0): Buffer {
  if (packet.type === PacketType.DATA && "data" in packet) {
    return encodeData(packet.data.connectID, packet.data.data, headroom, packet.data.error);
  }
  if ("unknown" in packet) return encodePacketWithWriter(packet, headroom);
  switch (packet.type) {
    case PacketType.DIAL_REQ: {
      const m = packet.dialRequest;
      const inner = strSize(m.protocol) + strSize(m.address) + intSize(m.random);
      const out = armBuffer(headroom, packet.type, inner);
      let p = out.length - inner;
      p = putStr(out, p, 0x0a, m.protocol);
      p = putStr(out, p, 0x12, m.address);
      putInt(out, p, 0x18, m.random);
      return out;
    }
    case PacketType.DIAL_RSP: {
      const m = packet.dialResponse;
      const inner = strSize(m.error) + intSize(m.connectID) + intSize(m.random);
      const out = armBuffer(headroom, packet.type, inner);
      let p = out.length - inner;
      p = putStr(out, p, 0x0a, m.error);
      p = putInt(out, p, 0x10, m.connectID);
      putInt(out, p, 0x18, m.random);
      return out;
    }
    case PacketType.CLOSE_REQ: {
      const id = packet.closeRequest.connectID;
      const out = armBuffer(headroom, packet.type, intSize(id));
      putInt(out, out.length - intSize(id), 0x08, id);
      return out;
    }
    case PacketType.CLOSE_RSP: {
      const m = packet.closeResponse;
      const inner = strSize(m.error) + intSize(m.connectID);
      const out = armBuffer(headroom, packet.type, inner);
      const p = putStr(out, out.length - inner, 0x0a, m.error);
      putInt(out, p, 0x10, m.connectID);
      return out;
    }
    case PacketType.DIAL_CLS: {
      const random = packet.closeDial.random;
      const out = armBuffer(headroom, packet.type, intSize(random));
      putInt(out, out.length - intSize(random), 0x08, random);
      return out;
    }
    default:
      return armBuffer(headroom, PacketType.DRAIN, 0);
  }
}

/**
 * The generic encoder (@bufbuild/protobuf's writer): unknown packet types, and the reference the
 * hand-written encoders are tested against.
 */
export function encodePacketWithWriter(packet: Packet, headroom = 0): Buffer {
  const w = new BinaryWriter();
  if (packet.type !== PacketType.DIAL_REQ) w.tag(1, WireType.Varint).int32(packet.type);
  if ("unknown" in packet) return withHeadroom(w.finish(), headroom);
  const field = ARM_FIELD[packet.type];
  w.tag(field, WireType.LengthDelimited).fork();
  switch (packet.type) {
    case PacketType.DIAL_REQ: {
      const m = packet.dialRequest;
      if (m.protocol) w.tag(1, WireType.LengthDelimited).string(m.protocol);
      if (m.address) w.tag(2, WireType.LengthDelimited).string(m.address);
      if (m.random) w.tag(3, WireType.Varint).int64(m.random);
      break;
    }
    case PacketType.DIAL_RSP: {
      const m = packet.dialResponse;
      if (m.error) w.tag(1, WireType.LengthDelimited).string(m.error);
      if (m.connectID) w.tag(2, WireType.Varint).int64(m.connectID);
      if (m.random) w.tag(3, WireType.Varint).int64(m.random);
      break;
    }
    case PacketType.CLOSE_REQ:
      if (packet.closeRequest.connectID) w.tag(1, WireType.Varint).int64(packet.closeRequest.connectID);
      break;
    case PacketType.CLOSE_RSP: {
      const m = packet.closeResponse;
      if (m.error) w.tag(1, WireType.LengthDelimited).string(m.error);
      if (m.connectID) w.tag(2, WireType.Varint).int64(m.connectID);
      break;
    }
    case PacketType.DATA: {
      const m = packet.data;
      if (m.connectID) w.tag(1, WireType.Varint).int64(m.connectID);
      if (m.error) w.tag(2, WireType.LengthDelimited).string(m.error);
      if (m.data.length > 0) w.tag(3, WireType.LengthDelimited).bytes(m.data);
      break;
    }
    case PacketType.DIAL_CLS:
      if (packet.closeDial.random) w.tag(1, WireType.Varint).int64(packet.closeDial.random);
      break;
    case PacketType.DRAIN:
      break;
  }
  w.join();
  return withHeadroom(w.finish(), headroom);
}

// The hand-written encoders write what BinaryWriter writes: fields in order, zero values left
// out, int64 as a two's complement varint (10 bytes when negative), strings as UTF-8.

/** Oneof arm tag byte (field << 3 | length-delimited), indexed by packet type. */
const ARM_TAG = [0x12, 0x1a, 0x2a, 0x32, 0x22, 0x3a, 0x42] as const;

/** A buffer for a packet whose arm holds `inner` bytes, filled up to the arm's content. */
function armBuffer(headroom: number, type: PacketType, inner: number): Buffer {
  const head = (type === PacketType.DIAL_REQ ? 0 : 2) + 1 + varintSize32(inner);
  const out = Buffer.allocUnsafe(headroom + head + inner);
  let p = headroom;
  if (type !== PacketType.DIAL_REQ) {
    out[p++] = 0x08;
    out[p++] = type;
  }
  out[p++] = ARM_TAG[type];
  writeVarint32(out, p, inner);
  return out;
}

function strSize(s: string): number {
  if (!s) return 0;
  const n = Buffer.byteLength(s, "utf8");
  return 1 + varintSize32(n) + n;
}
function intSize(v: bigint): number {
  return v ? 1 + varintSize64(v) : 0;
}
function putStr(out: Buffer, p: number, tag: number, s: string): number {
  if (!s) return p;
  out[p++] = tag;
  p = writeVarint32(out, p, Buffer.byteLength(s, "utf8"));
  return p + out.write(s, p, "utf8");
}
function putInt(out: Buffer, p: number, tag: number, v: bigint): number {
  if (!v) return p;
  out[p++] = tag;
  return writeVarint64(out, p, v);
}

function withHeadroom(bytes: Uint8Array, headroom: number): Buffer {
  const out = Buffer.allocUnsafe(headroom + bytes.length);
  out.set(bytes, headroom);
  return out;
}

/** Splits an int64 into, or assembles it from, its two 32-bit halves (no bigint arithmetic). */
const I64 = new DataView(new ArrayBuffer(8));

/** Number of bytes `value` takes as an unsigned varint (values are < 2^64). */
function varintSize64(value: bigint): number {
  if (value < 0n) return 10; // negative int64 is encoded as 10 bytes two's complement
  if (value < 0x80000000n) return varintSize32(Number(value));
  const hi = Number(value >> 32n); // value < 2^63: hi < 2^31
  return Math.ceil((64 - Math.clz32(hi)) / 7);
}
function varintSize32(value: number): number {
  return value < 0x80 ? 1 : value < 0x4000 ? 2 : value < 0x200000 ? 3 : value < 0x10000000 ? 4 : 5;
}
function writeVarint32(buf: Buffer, pos: number, value: number): number {
  while (value >= 0x80) {
    buf[pos++] = (value & 0x7f) | 0x80;
    value >>>= 7;
  }
  buf[pos++] = value;
  return pos;
}
function writeVarint64(buf: Buffer, pos: number, value: bigint): number {
  if (value >= 0n && value < 0x80000000n) return writeVarint32(buf, pos, Number(value));
  // Two 32-bit halves (no bigint arithmetic per byte), as @bufbuild/protobuf's varint64write.
  I64.setBigInt64(0, value, true);
  let lo = I64.getUint32(0, true);
  let hi = I64.getUint32(4, true);
  while (hi > 0 || lo > 0x7f) {
    buf[pos++] = (lo & 0x7f) | 0x80;
    lo = ((lo >>> 7) | (hi << 25)) >>> 0;
    hi >>>= 7;
  }
  buf[pos++] = lo;
  return pos;
}

/**
 * Encode `Packet{type: DATA, data: {connectID, data}}` into one buffer (the hot path).
 * Produces the same bytes as the generic encoder.
 */
export function encodeData(connectID: bigint, data: Uint8Array, headroom = 0, error = ""): Buffer {
  const errBytes = error ? Buffer.from(error, "utf8") : undefined;
  let inner = 0;
  if (connectID !== 0n) inner += 1 + varintSize64(connectID);
  if (errBytes) inner += 1 + varintSize32(errBytes.length) + errBytes.length;
  if (data.length > 0) inner += 1 + varintSize32(data.length) + data.length;
  const total = 2 + 1 + varintSize32(inner) + inner;
  const out = Buffer.allocUnsafe(headroom + total);
  let p = headroom;
  out[p++] = 0x08; // field 1 varint
  out[p++] = PacketType.DATA;
  out[p++] = 0x22; // field 4 length-delimited
  p = writeVarint32(out, p, inner);
  if (connectID !== 0n) {
    out[p++] = 0x08;
    p = writeVarint64(out, p, connectID);
  }
  if (errBytes) {
    out[p++] = 0x12;
    p = writeVarint32(out, p, errBytes.length);
    out.set(errBytes, p);
    p += errBytes.length;
  }
  if (data.length > 0) {
    out[p++] = 0x1a;
    p = writeVarint32(out, p, data.length);
    out.set(data, p);
  }
  return out;
}

/** Decode a Packet. DATA payloads are views into `bytes` (no copy). Unknown fields are skipped. */
export function decodePacket(bytes: Uint8Array): Packet {
  return decodeCanonical(bytes) ?? decodePacketWithReader(bytes);
}

/**
 * The generic decoder (@bufbuild/protobuf's reader): any encoding protobuf allows (fields in any
 * order, repeated, unknown). {@link decodePacket} tries the canonical layout first.
 */
export function decodePacketWithReader(bytes: Uint8Array): Packet {
  try {
    return decodeUnchecked(bytes);
  } catch (err) {
    if (err instanceof PacketDecodeError) throw err;
    throw new PacketDecodeError(`malformed packet (${bytes.length} bytes): ${errorMessage(err)}`, {
      cause: err,
    });
  }
}

function decodeUnchecked(bytes: Uint8Array): Packet {
  const r = new BinaryReader(bytes);
  let type = 0;
  let arm: Uint8Array | undefined;
  let armField = 0;
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (field === 1 && wt === WireType.Varint) type = r.int32();
    else if (field >= 2 && field <= 8 && wt === WireType.LengthDelimited) {
      const bytes = r.bytes();
      // Protobuf semantics, as Go decodes: the same message field repeated merges (parse the
      // concatenation); another oneof arm replaces it.
      arm = armField === field && arm ? Buffer.concat([arm, bytes]) : bytes;
      armField = field;
    } else r.skip(wt, field);
  }
  if (type < 0 || type > 6) return { type, unknown: true };
  const expected = ARM_FIELD[type as PacketType];
  // Go reads the payload through getters: a missing or mismatched arm reads as zero values.
  const sub = new BinaryReader(armField === expected && arm ? arm : new Uint8Array(0));
  switch (type) {
    case PacketType.DIAL_REQ: {
      const m: DialRequest = { protocol: "", address: "", random: 0n };
      readFields(sub, (f, wt) => {
        if (f === 1 && wt === WireType.LengthDelimited) m.protocol = sub.string();
        else if (f === 2 && wt === WireType.LengthDelimited) m.address = sub.string();
        else if (f === 3 && wt === WireType.Varint) m.random = toBig(sub.int64());
        else return false;
        return true;
      });
      return { type, dialRequest: m };
    }
    case PacketType.DIAL_RSP: {
      const m: DialResponse = { error: "", connectID: 0n, random: 0n };
      readFields(sub, (f, wt) => {
        if (f === 1 && wt === WireType.LengthDelimited) m.error = sub.string();
        else if (f === 2 && wt === WireType.Varint) m.connectID = toBig(sub.int64());
        else if (f === 3 && wt === WireType.Varint) m.random = toBig(sub.int64());
        else return false;
        return true;
      });
      return { type, dialResponse: m };
    }
    case PacketType.CLOSE_REQ: {
      const m: CloseRequest = { connectID: 0n };
      readFields(sub, (f, wt) => {
        if (f === 1 && wt === WireType.Varint) m.connectID = toBig(sub.int64());
        else return false;
        return true;
      });
      return { type, closeRequest: m };
    }
    case PacketType.CLOSE_RSP: {
      const m: CloseResponse = { error: "", connectID: 0n };
      readFields(sub, (f, wt) => {
        if (f === 1 && wt === WireType.LengthDelimited) m.error = sub.string();
        else if (f === 2 && wt === WireType.Varint) m.connectID = toBig(sub.int64());
        else return false;
        return true;
      });
      return { type, closeResponse: m };
    }
    case PacketType.DATA: {
      const m: Data = { connectID: 0n, error: "", data: EMPTY };
      readFields(sub, (f, wt) => {
        if (f === 1 && wt === WireType.Varint) m.connectID = toBig(sub.int64());
        else if (f === 2 && wt === WireType.LengthDelimited) m.error = sub.string();
        else if (f === 3 && wt === WireType.LengthDelimited) m.data = sub.bytes();
        else return false;
        return true;
      });
      return { type, data: m };
    }
    case PacketType.DIAL_CLS: {
      const m: CloseDial = { random: 0n };
      readFields(sub, (f, wt) => {
        if (f === 1 && wt === WireType.Varint) m.random = toBig(sub.int64());
        else return false;
        return true;
      });
      return { type, closeDial: m };
    }
    default:
      return { type: PacketType.DRAIN };
  }
}

const EMPTY = new Uint8Array(0);

function toBig(v: bigint | string): bigint {
  return typeof v === "bigint" ? v : BigInt(v);
}

function readFields(r: BinaryReader, onField: (field: number, wt: WireType) => boolean): void {
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (!onField(field, wt)) r.skip(wt, field);
  }
}

/** What a relay needs to route a packet: its type and the id that keys it. */
export interface PacketRoute {
  type: number;
  /** connectID of DATA, CLOSE_REQ, CLOSE_RSP, DIAL_RSP; 0n otherwise. */
  connectID: bigint;
  /** random of DIAL_REQ, DIAL_RSP, DIAL_CLS; 0n otherwise. */
  random: bigint;
  /**
   * The bytes are exactly what {@link encodePacket} writes for the decoded packet. A relay must
   * not forward non-canonical bytes as they are: a crafted packet (a repeated field or arm) can
   * be read one way by the relay and another way by the next hop. Re-encode those instead.
   */
  canonical: boolean;
}

/**
 * Read the routing fields of an encoded packet without decoding payloads, so a relay can forward
 * the original bytes. Throws {@link PacketDecodeError} on malformed input.
 */
export function peekPacket(bytes: Uint8Array): PacketRoute {
  const fast = peekCanonicalData(bytes);
  if (fast !== undefined) return { type: PacketType.DATA, connectID: fast, random: 0n, canonical: true };
  const c = decodeCanonical(bytes);
  const p = c ?? decodePacketWithReader(bytes);
  return routeOf(p, c !== undefined || (!("unknown" in p) && Buffer.from(bytes).equals(encodePacket(p))));
}

/** A packet's routing fields, and the packet itself when peeking decoded it. */
export interface PeekedPacket {
  route: PacketRoute;
  /**
   * The decoded packet: every type but a canonical DATA, whose payload is not read. A relay that
   * needs a field (a DIAL_REQ's address, an error text) reads it here instead of decoding again.
   */
  packet: Packet | undefined;
}

/** {@link peekPacket}, keeping the packet it decoded. Throws {@link PacketDecodeError} on malformed input. */
export function peekDecoded(bytes: Uint8Array): PeekedPacket {
  const fast = peekCanonicalData(bytes);
  if (fast !== undefined) {
    return { route: { type: PacketType.DATA, connectID: fast, random: 0n, canonical: true }, packet: undefined };
  }
  const c = decodeCanonical(bytes);
  const p = c ?? decodePacketWithReader(bytes);
  const canonical = c !== undefined || (!("unknown" in p) && Buffer.from(bytes).equals(encodePacket(p)));
  return { route: routeOf(p, canonical), packet: p };
}

function routeOf(p: Packet, canonical: boolean): PacketRoute {
  if ("dialRequest" in p) return { type: p.type, connectID: 0n, random: p.dialRequest.random, canonical };
  if ("dialResponse" in p)
    return { type: p.type, connectID: p.dialResponse.connectID, random: p.dialResponse.random, canonical };
  if ("closeRequest" in p) return { type: p.type, connectID: p.closeRequest.connectID, random: 0n, canonical };
  if ("closeResponse" in p) return { type: p.type, connectID: p.closeResponse.connectID, random: 0n, canonical };
  if ("data" in p) return { type: p.type, connectID: p.data.connectID, random: 0n, canonical };
  if ("closeDial" in p) return { type: p.type, connectID: 0n, random: p.closeDial.random, canonical };
  return { type: p.type, connectID: 0n, random: 0n, canonical };
}

/**
 * The connectID of a DATA packet in exactly the canonical layout `08 04 22 <len>` then, each at
 * most once and in order, `08 <connectID>`, `12 <error>` (ASCII), `1a <data>`, ending the buffer;
 * else undefined (the caller decodes fully). Fields are walked, payload bytes are not read.
 */
function peekCanonicalData(bytes: Uint8Array): bigint | undefined {
  const n = bytes.length;
  if (n < 4 || bytes[0] !== 0x08 || bytes[1] !== PacketType.DATA || bytes[2] !== 0x22) return undefined;
  const len = readLength(bytes, 3);
  if (len <= 0 || cur + len !== n) return undefined;
  const connectID = optInt(bytes, 0x08);
  skipAscii(bytes, 0x12);
  const dl = optLength(bytes, 0x1a);
  if (dl > 0) cur += dl;
  return cur === n ? connectID : undefined;
}

// ---- the canonical layout, parsed by hand ----------------------------------------------------
//
// decodeCanonical accepts exactly the bytes encodePacket writes (which is also what Go's
// marshaller writes): `08 <type>` unless DIAL_REQ, then the type's arm holding its known fields in
// order, each at most once, none with a zero value, varints in their shortest form, strings in
// ASCII. Anything else (unknown types, other fields, repeated or reordered ones, other strings)
// is left to the library reader. Accepted bytes thus re-encode identically, which is what lets a
// relay forward them as they are (see PacketRoute.canonical).
//
// The readers share one cursor, `cur`: the position after what was read, or -1 once the input is
// malformed or not canonical (every later reader then reads nothing and leaves it at -1).

let cur = 0;
const ASCII = new TextDecoder();

/** A varint of at most 31 bits in its shortest form at `p`; -1 (and cur = -1) otherwise. */
function readLength(b: Uint8Array, p: number): number {
  let v = 0;
  for (let i = 0; i < 5 && p < b.length; i++) {
    const x = b[p++]!;
    v += (x & 0x7f) * 2 ** (7 * i);
    if (x < 0x80) {
      if (x === 0 && i > 0) break; // a longer form than needed
      if (v > 0x7fffffff) break;
      cur = p;
      return v;
    }
  }
  cur = -1;
  return -1;
}

/** An int64 varint in its shortest form at `p` (10 bytes for negative values); else cur = -1. */
function readInt64(b: Uint8Array, p: number): bigint {
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < 10 && p < b.length; i++) {
    const x = b[p++]!;
    const bits = x & 0x7f;
    if (i < 4) lo |= bits << (7 * i);
    else if (i === 4) {
      lo |= bits << 28;
      hi = bits >>> 4;
    } else hi |= bits << (7 * i - 32);
    if (x < 0x80) {
      // The shortest form ends in a non-zero byte; a 10th byte holds only bit 63.
      if ((x === 0 && i > 0) || (i === 9 && x !== 1)) break;
      cur = p;
      if (i < 4) return BigInt(lo);
      I64.setInt32(0, lo, true);
      I64.setInt32(4, hi, true);
      return I64.getBigInt64(0, true);
    }
  }
  cur = -1;
  return 0n;
}

/** The int64 field `tag` if it is next (a zero value is not canonical), else 0n. */
function optInt(b: Uint8Array, tag: number): bigint {
  if (cur < 0 || cur >= b.length || b[cur] !== tag) return 0n;
  const v = readInt64(b, cur + 1);
  if (v === 0n) cur = -1;
  return v;
}

/** The length and start of the non-empty length-delimited field `tag` if it is next, else 0. */
function optLength(b: Uint8Array, tag: number): number {
  if (cur < 0 || cur >= b.length || b[cur] !== tag) return 0;
  const len = readLength(b, cur + 1);
  if (len <= 0 || cur + len > b.length) {
    cur = -1;
    return 0;
  }
  return len;
}

/** Skip the ASCII string field `tag` if it is next; returns its length (other strings: cur = -1). */
function skipAscii(b: Uint8Array, tag: number): number {
  const len = optLength(b, tag);
  if (len === 0) return 0;
  const start = cur;
  for (let i = start; i < start + len; i++) {
    if (b[i]! >= 0x80) {
      cur = -1;
      return 0;
    }
  }
  cur = start + len;
  return len;
}

/** The ASCII string field `tag` if it is next, else "" (other strings: cur = -1). */
function optAscii(b: Uint8Array, tag: number): string {
  const len = skipAscii(b, tag);
  return len === 0 ? "" : ASCII.decode(b.subarray(cur - len, cur));
}

/** Decode `b` if it is in the canonical layout (see above), else undefined. */
function decodeCanonical(b: Uint8Array): Packet | undefined {
  const n = b.length;
  let type: number = PacketType.DIAL_REQ;
  let p = 0;
  if (n >= 2 && b[0] === 0x08) {
    type = b[1]!;
    if (type < PacketType.DIAL_RSP || type > PacketType.DRAIN) return undefined;
    p = 2;
  }
  if (p >= n || b[p] !== ARM_TAG[type as PacketType]) return undefined;
  const len = readLength(b, p + 1);
  if (len < 0 || cur + len !== n) return undefined;
  switch (type) {
    case PacketType.DIAL_REQ: {
      const protocol = optAscii(b, 0x0a);
      const address = optAscii(b, 0x12);
      const random = optInt(b, 0x18);
      return cur === n ? { type, dialRequest: { protocol, address, random } } : undefined;
    }
    case PacketType.DIAL_RSP: {
      const error = optAscii(b, 0x0a);
      const connectID = optInt(b, 0x10);
      const random = optInt(b, 0x18);
      return cur === n ? { type, dialResponse: { error, connectID, random } } : undefined;
    }
    case PacketType.CLOSE_REQ: {
      const connectID = optInt(b, 0x08);
      return cur === n ? { type, closeRequest: { connectID } } : undefined;
    }
    case PacketType.CLOSE_RSP: {
      const error = optAscii(b, 0x0a);
      const connectID = optInt(b, 0x10);
      return cur === n ? { type, closeResponse: { error, connectID } } : undefined;
    }
    case PacketType.DATA: {
      const connectID = optInt(b, 0x08);
      const error = optAscii(b, 0x12);
      const dl = optLength(b, 0x1a);
      const data = dl > 0 ? b.subarray(cur, cur + dl) : EMPTY;
      if (dl > 0) cur += dl;
      return cur === n ? { type, data: { connectID, error, data } } : undefined;
    }
    case PacketType.DIAL_CLS: {
      const random = optInt(b, 0x08);
      return cur === n ? { type, closeDial: { random } } : undefined;
    }
    default:
      return cur === n ? { type: PacketType.DRAIN } : undefined;
  }
}
