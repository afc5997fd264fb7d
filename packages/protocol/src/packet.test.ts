import { test } from "node:test";
import assert from "node:assert/strict";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  PacketType,
  decodePacket,
  encodeData,
  encodePacket,
  peekDecoded,
  peekPacket,
  packetTypeName,
  type Packet,
} from "./packet.js";

const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

test("DIAL_REQ has no type field on the wire (enum value 0) — golden bytes", () => {
  const bytes = encodePacket({
    type: PacketType.DIAL_REQ,
    dialRequest: { protocol: "tcp", address: "a:1", random: 1n },
  });
  // 12 0c | 0a 03 "tcp" | 12 03 "a:1" | 18 01
  assert.equal(hex(bytes), "120c0a03746370120361" + "3a31" + "1801");
});

test("DIAL_RSP golden bytes with a random above 2^53", () => {
  const random = 2n ** 62n + 12345n;
  const bytes = encodePacket({ type: PacketType.DIAL_RSP, dialResponse: { error: "", connectID: 7n, random } });
  assert.equal(hex(bytes.subarray(0, 6)), "0801" + "1a0c" + "1007");
  const back = decodePacket(bytes);
  assert.ok("dialResponse" in back);
  assert.equal(back.dialResponse.random, random);
  assert.equal(back.dialResponse.connectID, 7n);
});

test("DRAIN carries an empty oneof arm", () => {
  assert.equal(hex(encodePacket({ type: PacketType.DRAIN })), "08064200");
});

test("CLOSE_REQ, CLOSE_RSP, DIAL_CLS golden bytes", () => {
  assert.equal(
    hex(encodePacket({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: 300n } })),
    "08022a030" + "8ac02",
  );
  assert.equal(
    hex(encodePacket({ type: PacketType.CLOSE_RSP, closeResponse: { error: "x", connectID: 1n } })),
    "080332050a01781001",
  );
  assert.equal(hex(encodePacket({ type: PacketType.DIAL_CLS, closeDial: { random: 5n } })), "08053a020805");
});

test("DATA fast path matches the library writer byte for byte", () => {
  const payload = Buffer.from("hello world");
  for (const connectID of [0n, 1n, 127n, 128n, 2n ** 40n, 2n ** 63n - 1n]) {
    const w = new BinaryWriter();
    w.tag(1, WireType.Varint).int32(4);
    w.tag(4, WireType.LengthDelimited).fork();
    if (connectID) w.tag(1, WireType.Varint).int64(connectID);
    w.tag(3, WireType.LengthDelimited).bytes(payload);
    w.join();
    assert.equal(hex(encodeData(connectID, payload)), hex(w.finish()), `connectID ${connectID}`);
  }
});

test("DATA keeps headroom free and decodes zero-copy", () => {
  const payload = Buffer.alloc(70_000, 0xab);
  const framed = encodeData(9n, payload, 5);
  const msg = framed.subarray(5);
  const p = decodePacket(msg);
  assert.ok("data" in p);
  assert.equal(p.data.connectID, 9n);
  assert.equal(p.data.data.length, payload.length);
  assert.equal(p.data.data.buffer, msg.buffer, "payload is a view, not a copy");
});

test("every packet type round-trips", () => {
  const packets: Packet[] = [
    { type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "[fd00::1]:443", random: 2n ** 63n - 1n } },
    { type: PacketType.DIAL_RSP, dialResponse: { error: "dial tcp: connection refused", connectID: 0n, random: 3n } },
    { type: PacketType.CLOSE_REQ, closeRequest: { connectID: 4n } },
    { type: PacketType.CLOSE_RSP, closeResponse: { error: "", connectID: 4n } },
    { type: PacketType.DATA, data: { connectID: 4n, error: "", data: Buffer.from([1, 2, 3]) } },
    { type: PacketType.DIAL_CLS, closeDial: { random: 3n } },
    { type: PacketType.DRAIN },
  ];
  for (const p of packets) {
    const back = decodePacket(encodePacket(p));
    assert.deepEqual(
      JSON.parse(JSON.stringify(back, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v))),
      JSON.parse(JSON.stringify(p, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v))),
      packetTypeName(p.type),
    );
  }
});

test("peekPacket reads routing ids without decoding payloads", () => {
  assert.deepEqual(peekPacket(encodeData(77n, Buffer.alloc(10))), {
    type: 4,
    connectID: 77n,
    random: 0n,
    canonical: true,
  });
  assert.deepEqual(
    peekPacket(
      encodePacket({ type: PacketType.DIAL_RSP, dialResponse: { error: "", connectID: 2n, random: 2n ** 60n } }),
    ),
    { type: 1, connectID: 2n, random: 2n ** 60n, canonical: true },
  );
  assert.deepEqual(peekPacket(encodePacket({ type: PacketType.DIAL_CLS, closeDial: { random: 9n } })), {
    type: 5,
    connectID: 0n,
    random: 9n,
    canonical: true,
  });
});

test("crafted DATA (two arms, a repeated connectID) is not canonical and routes as the next hop decodes it", () => {
  const two = Buffer.concat([encodeData(5n, Buffer.from("x")), encodeData(7n, Buffer.from("y"))]);
  const route = peekPacket(two);
  assert.equal(route.canonical, false);
  const p = decodePacket(two);
  assert.ok("data" in p);
  assert.equal(route.connectID, p.data.connectID, "peek and decode agree");
  assert.equal(p.data.connectID, 7n, "protobuf merge: the later connectID wins");
  assert.equal(Buffer.from(p.data.data).toString(), "y");
  // 08 04 22 02 08 01 | 08 04 22 00: the second, empty arm merges and keeps connectID 1 (as Go does)
  const merged = Buffer.from("0804220208010804" + "2200", "hex");
  assert.deepEqual(peekPacket(merged), { type: 4, connectID: 1n, random: 0n, canonical: false });
});

test("peekDecoded: peekPacket's route and the packet decodePacket reads, no payload read for a canonical DATA", () => {
  const packets: Packet[] = [
    { type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: "a.b:443", random: 3n } },
    { type: PacketType.DIAL_RSP, dialResponse: { error: "refused", connectID: 0n, random: 3n } },
    { type: PacketType.CLOSE_RSP, closeResponse: { error: "", connectID: 9n } },
    { type: PacketType.DIAL_CLS, closeDial: { random: 4n } },
  ];
  const two = Buffer.concat([encodeData(5n, Buffer.from("x")), encodeData(7n, Buffer.from("y"))]);
  for (const bytes of [...packets.map((p) => encodePacket(p)), two]) {
    const { route, packet } = peekDecoded(bytes);
    assert.deepEqual(route, peekPacket(bytes));
    assert.deepEqual(packet, decodePacket(bytes));
  }
  const data = encodeData(5n, Buffer.from("payload"));
  assert.deepEqual(peekDecoded(data), { route: peekPacket(data), packet: undefined });
});

test("a missing or mismatched arm reads as zero values, like Go getters", () => {
  const p = decodePacket(Buffer.from("0804", "hex")); // DATA without arm
  assert.ok("data" in p);
  assert.equal(p.data.connectID, 0n);
});

test("unknown packet types decode as unknown, unknown fields are skipped", () => {
  const p = decodePacket(Buffer.from("0863" + "f80101", "hex"));
  assert.equal(p.type, 99);
  assert.ok("unknown" in p);
});

test("garbage is a PacketDecodeError, never a crash", () => {
  for (const g of ["ff", "12ff", "0a", "1205ffff", "22"]) {
    assert.throws(() => decodePacket(Buffer.from(g, "hex")), { name: "PacketDecodeError" }, g);
  }
});
