import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { bodyFraming, checkUpgradeFraming } from "./body-framing.js";
import { GatewayError } from "./gateway-error.js";

const refused = (fn: () => unknown): void =>
  assert.throws(fn, (e: unknown) => e instanceof GatewayError && e.status === 400);

describe("body framing", () => {
  test("HTTP/1.1: chunked bodies on GET, HEAD, DELETE, OPTIONS are refused; lengths and POST streams pass", () => {
    for (const m of ["GET", "HEAD", "DELETE", "OPTIONS"])
      refused(() => bodyFraming(m, { "transfer-encoding": "chunked" }, undefined));
    assert.deepEqual(bodyFraming("POST", { "transfer-encoding": "chunked" }, undefined), { body: "stream" });
    assert.deepEqual(bodyFraming("GET", { "content-length": "5" }, undefined), { body: "length", length: 5 });
    assert.deepEqual(bodyFraming("GET", {}, undefined), { body: "none" });
    assert.deepEqual(bodyFraming("GET", { "content-length": "0" }, undefined), { body: "none" });
    refused(() => bodyFraming("POST", { "content-length": "5", "transfer-encoding": "chunked" }, undefined));
  });

  test("HTTP/2: a body is a HEADERS frame that did not end the stream", () => {
    for (const m of ["GET", "HEAD", "DELETE", "OPTIONS"]) refused(() => bodyFraming(m, {}, false));
    assert.deepEqual(bodyFraming("GET", {}, true), { body: "none" });
    assert.deepEqual(bodyFraming("GET", { "content-length": "3" }, false), { body: "length", length: 3 });
    assert.deepEqual(bodyFraming("POST", {}, false), { body: "stream" });
    refused(() => bodyFraming("GET", { "content-length": "3" }, true));
    refused(() => bodyFraming("POST", { "transfer-encoding": "chunked" }, false));
  });

  test("unreadable lengths are refused", () => {
    for (const cl of ["-1", "+5", "5, 5", "0x10", "1e3", "", "99999999999999999"])
      refused(() => bodyFraming("POST", { "content-length": cl }, false));
  });

  test("an upgrade carries no body", () => {
    checkUpgradeFraming({});
    checkUpgradeFraming({ "content-length": "0" });
    refused(() => checkUpgradeFraming({ "content-length": "5" }));
    refused(() => checkUpgradeFraming({ "transfer-encoding": "chunked" }));
  });
});
