import { createHash } from "node:crypto";
import assert from "node:assert/strict";
import { test } from "node:test";
import { contentHash } from "./content-hash.js";

test("contentHash: the order fields were written in does not count, their values do", () => {
  const a = contentHash({ metadata: { name: "x", labels: { b: "1", a: "2" } }, spec: [1, { y: 2, x: 1 }] });
  const b = contentHash({ spec: [1, { x: 1, y: 2 }], metadata: { labels: { a: "2", b: "1" }, name: "x" } });
  assert.equal(a, b);
  assert.notEqual(a, contentHash({ metadata: { name: "x", labels: { b: "1", a: "3" } }, spec: [1, { y: 2, x: 1 }] }));
  assert.notEqual(contentHash([1, 2]), contentHash([2, 1]), "array order counts");
  assert.match(a, /^[0-9a-f]{16}$/);
});

test("contentHash: a string is hashed as it is (a PEM's hash is the hash of its bytes)", () => {
  const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  assert.equal(contentHash(pem), createHash("sha256").update(pem).digest("hex").slice(0, 16));
});
