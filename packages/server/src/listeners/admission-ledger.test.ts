import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { AdmissionLedger, sourceKey } from "./admission-ledger.js";

const limits = { maxPerSource: 1_000, maxAwaitingHello: 1_000, maxQueued: 1_000 };

describe("AdmissionLedger", () => {
  test("a flood of silent connections evicts its own oldest: a new client always gets in", () => {
    const ledger = new AdmissionLedger<string>({ ...limits, maxAwaitingHello: 3 });
    for (const c of ["s1", "s2", "s3"]) assert.equal(ledger.arrive(c, "10.0.0.9").admitted, true);
    const arrival = ledger.arrive("client", "10.0.0.1");
    assert.equal(arrival.admitted, true);
    assert.deepEqual(arrival.evicted, [{ conn: "s1", reason: "hello_limit" }]);
    assert.equal(ledger.helloed("client"), "queued");
    assert.equal(ledger.next(), "client");
    assert.deepEqual(ledger.counts(), { awaitingHello: 2, queued: 0, unfinished: 3, sources: 2 });
  });

  test("a source at its limit loses its oldest silent connection, or the new one when all sent a ClientHello", () => {
    const ledger = new AdmissionLedger<string>({ ...limits, maxPerSource: 2 });
    ledger.arrive("a", "10.0.0.9");
    ledger.arrive("b", "10.0.0.9");
    assert.equal(ledger.helloed("a"), "queued");
    // b never spoke: it makes room for c.
    assert.deepEqual(ledger.arrive("c", "10.0.0.9"), {
      admitted: true,
      evicted: [{ conn: "b", reason: "source_limit" }],
    });
    assert.equal(ledger.helloed("c"), "queued");
    // a and c wait in the queue: d is refused, another source is not affected.
    assert.deepEqual(ledger.arrive("d", "10.0.0.9"), { admitted: false, evicted: [] });
    assert.equal(ledger.arrive("e", "10.0.0.1").admitted, true);
    // Once a is through its handshake, the source has room again.
    assert.equal(ledger.next(), "a");
    ledger.finished("a");
    assert.equal(ledger.arrive("f", "10.0.0.9").admitted, true);
  });

  test("turns go round-robin over sources, oldest first within each", () => {
    const ledger = new AdmissionLedger<string>(limits);
    for (let i = 1; i <= 4; i++) {
      ledger.arrive(`x${i}`, "10.0.0.9");
      ledger.helloed(`x${i}`);
    }
    for (const c of ["y1", "y2"]) {
      ledger.arrive(c, "10.0.0.1");
      ledger.helloed(c);
    }
    ledger.arrive("z1", "10.0.0.2");
    ledger.helloed("z1");
    const order: string[] = [];
    for (let c = ledger.peek(); c !== undefined; c = ledger.peek()) {
      // peek tells whose turn is next and leaves it waiting.
      assert.equal(ledger.peek(), c);
      assert.equal(ledger.next(), c);
      order.push(c);
    }
    assert.deepEqual(order, ["x1", "y1", "z1", "x2", "y2", "x3", "x4"]);
    assert.equal(ledger.next(), undefined);
  });

  test("past maxQueued a ClientHello is shed and forgotten", () => {
    const ledger = new AdmissionLedger<string>({ ...limits, maxQueued: 1 });
    ledger.arrive("a", "10.0.0.1");
    ledger.arrive("b", "10.0.0.2");
    assert.equal(ledger.helloed("a"), "queued");
    assert.equal(ledger.helloed("b"), "shed");
    assert.deepEqual(ledger.counts(), { awaitingHello: 0, queued: 1, unfinished: 1, sources: 1 });
  });

  test("finished is idempotent and leaves nothing behind, in every phase", () => {
    const ledger = new AdmissionLedger<string>(limits);
    ledger.arrive("hello", "10.0.0.1");
    ledger.arrive("queued", "10.0.0.1");
    ledger.helloed("queued");
    ledger.arrive("handshaking", "10.0.0.2");
    ledger.helloed("handshaking");
    assert.equal(ledger.next(), "queued");
    for (const c of ["hello", "queued", "handshaking", "hello", "unknown"]) ledger.finished(c);
    assert.deepEqual(ledger.counts(), { awaitingHello: 0, queued: 0, unfinished: 0, sources: 0 });
    assert.equal(ledger.next(), undefined);
  });
});

describe("sourceKey", () => {
  test("IPv4 as is (also IPv4-mapped), IPv6 by its /64", () => {
    assert.equal(sourceKey("10.1.2.3"), "10.1.2.3");
    assert.equal(sourceKey("::ffff:10.1.2.3"), "10.1.2.3");
    assert.equal(sourceKey("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
    assert.equal(sourceKey("2001:db8:1:2::7"), "2001:db8:1:2::/64");
    assert.equal(sourceKey("2001:0db8::1"), "2001:db8:0:0::/64");
    assert.equal(sourceKey("::1"), "0:0:0:0::/64");
    assert.equal(sourceKey("fe80::1%eth0"), "fe80:0:0:0::/64");
    assert.equal(sourceKey(undefined), "unknown");
  });
});
