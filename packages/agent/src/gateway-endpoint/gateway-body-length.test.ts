/**
 * The declared length of an upstream answer's body, with which the endpoint ends its answer to the
 * gateway at the last byte: only a single plain decimal `Content-Length` of an answer that has
 * that body (not a HEAD, 204 or 304).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { bodyLength } from "./gateway-proxy.js";

test("one plain decimal Content-Length is the body's length, whatever the name's case", () => {
  assert.equal(bodyLength("GET", 200, ["Content-Type", "application/json", "Content-Length", "42"]), 42);
  assert.equal(bodyLength("POST", 201, ["content-length", " 7 "]), 7);
  assert.equal(bodyLength("GET", 404, ["CONTENT-LENGTH", "0"]), 0);
});

test("no length without a single well-formed Content-Length", () => {
  assert.equal(bodyLength("GET", 200, []), undefined);
  assert.equal(bodyLength("GET", 200, ["Content-Length", "4", "Content-Length", "4"]), undefined);
  assert.equal(bodyLength("GET", 200, ["Content-Length", "-1"]), undefined);
  assert.equal(bodyLength("GET", 200, ["Content-Length", "1e3"]), undefined);
  assert.equal(bodyLength("GET", 200, ["Content-Length", "1234567890123456"]), undefined);
});

test("a HEAD, a 204 and a 304 have no body of that length", () => {
  assert.equal(bodyLength("HEAD", 200, ["Content-Length", "42"]), undefined);
  assert.equal(bodyLength("GET", 204, ["Content-Length", "42"]), undefined);
  assert.equal(bodyLength("GET", 304, ["Content-Length", "42"]), undefined);
});
