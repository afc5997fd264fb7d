/**
 * The konnectivity `Packet` message and its protobuf codec.
 *
 * Wire facts (see docs/protocol.md): no protobuf package; `type` is field 1 and is absent on the
 * wire for DIAL_REQ (enum value 0); each type has one oneof arm (fields 2-8); every int64 is a
 * plain varint and is represented here as `bigint` so values above 2^53 survive.
 *
 * Cold packets are encoded and decoded with @bufbuild/protobuf's wire reader/writer. DATA, the
 * hot path, has a hand-written encoder that writes into one exactly-sized buffer with optional
 * headroom (so the gRPC layer can put its 5-byte prefix in front without another copy), and
 * {@link peekPacket} reads only what a relay needs to route a packet without decoding it.
 */
import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

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
export class PacketDecodeError extends Error {
  readonly code = "CP_ERR_PACKET_DECODE";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
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
    case PacketType.DIAL_CLS:
      if (packet.closeDial.random) w.tag(1, WireType.Varint).int64(packet.closeDial.random);
      break;
    case PacketType.DRAIN:
      break;
  }
  w.join();
  return withHeadroom(w.finish(), headroom);
}

function withHeadroom(bytes: Uint8Array, headroom: number): Buffer {
  const out = Buffer.allocUnsafe(headroom + bytes.length);
  out.set(bytes, headroom);
  return out;
}

/** Number of bytes `value` takes as an unsigned varint (values are < 2^64). */
function varintSize64(value: bigint): number {
  if (value < 0n) return 10; // negative int64 is encoded as 10 bytes two's complement
  let n = 1;
  while (value >= 0x80n) {
    value >>= 7n;
    n++;
  }
  return n;
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
  let v = BigInt.asUintN(64, value);
  if (v < 0x80000000n) return writeVarint32(buf, pos, Number(v));
  while (v >= 0x80n) {
    buf[pos++] = Number(v & 0x7fn) | 0x80;
    v >>= 7n;
  }
  buf[pos++] = Number(v);
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
  try {
    return decodeUnchecked(bytes);
  } catch (err) {
    if (err instanceof PacketDecodeError) throw err;
    throw new PacketDecodeError(`malformed packet (${bytes.length} bytes): ${(err as Error).message}`, {
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
  const p = decodePacket(bytes);
  const canonical = !("unknown" in p) && Buffer.from(bytes).equals(encodePacket(p));
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
 * most once and in order, `08 <connectID>`, `12 <error>`, `1a <data>`, ending the buffer; else
 * undefined (the caller decodes fully). Fields are walked, payload bytes are not read.
 */
function peekCanonicalData(bytes: Uint8Array): bigint | undefined {
  if (bytes.length < 3 || bytes[0] !== 0x08 || bytes[1] !== PacketType.DATA || bytes[2] !== 0x22) return undefined;
  try {
    const r = new BinaryReader(bytes.subarray(3));
    const len = r.uint32();
    if (len === 0 || r.pos + len !== r.len) return undefined;
    let connectID = 0n;
    let last = 0;
    while (r.pos < r.len) {
      const [field, wt] = r.tag();
      if (field <= last) return undefined;
      last = field;
      if (field === 1 && wt === WireType.Varint) {
        connectID = toBig(r.int64());
        if (connectID === 0n) return undefined; // proto3 omits zero: not canonical
      } else if ((field === 2 || field === 3) && wt === WireType.LengthDelimited) {
        if (r.bytes().length === 0) return undefined;
      } else return undefined;
    }
    return connectID;
  } catch {
    return undefined;
  }
}
