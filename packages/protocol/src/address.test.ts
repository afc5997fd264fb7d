import { test } from "node:test";
import assert from "node:assert/strict";
import { destHostKey, joinHostPort, parseHostPort } from "./address.js";

test("destHost keys follow the Go server exactly", () => {
  assert.equal(destHostKey("cluster1:443"), "cluster1");
  assert.equal(destHostKey("cluster1"), "cluster1");
  assert.equal(destHostKey("CLUSTER1:443"), "CLUSTER1");
  assert.equal(destHostKey("[fd00::1]:443"), "fd00::1");
  assert.equal(destHostKey("fd00::1:443"), "fd00::1:443", "unbracketed IPv6 keeps its port and matches nothing");
  assert.equal(destHostKey("10.0.0.7.east:5432"), "10.0.0.7.east");
});

test("parseHostPort requires a valid port", () => {
  assert.deepEqual(parseHostPort("east:443"), { host: "east", port: 443 });
  assert.deepEqual(parseHostPort("[fd00::1]:8080"), { host: "fd00::1", port: 8080 });
  assert.equal(parseHostPort("east"), undefined);
  assert.equal(parseHostPort("east:"), undefined);
  assert.equal(parseHostPort("east:0"), undefined);
  assert.equal(parseHostPort("east:70000"), undefined);
  assert.equal(parseHostPort("fd00::1:443"), undefined);
  assert.equal(parseHostPort(":443"), undefined);
});

test("joinHostPort brackets IPv6", () => {
  assert.equal(joinHostPort("fd00::1", 443), "[fd00::1]:443");
  assert.equal(joinHostPort("east", 443), "east:443");
});
