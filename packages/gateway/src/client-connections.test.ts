/** Which client a connection counts against. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { clientKeyOf } from "./client-connections.js";

test("IPv4 addresses count as themselves, IPv4-mapped ones as their IPv4 address", () => {
  assert.equal(clientKeyOf("10.1.2.3"), "10.1.2.3");
  assert.equal(clientKeyOf("::ffff:10.1.2.3"), "10.1.2.3");
  assert.equal(clientKeyOf("::FFFF:10.1.2.3"), "10.1.2.3");
});

test("IPv6 addresses count by their /64, however they are written", () => {
  const key = "2001:db8:0:1::/64";
  assert.equal(clientKeyOf("2001:db8:0:1::1"), key);
  assert.equal(clientKeyOf("2001:db8::1:ffff:ffff:ffff:ffff"), key);
  assert.equal(clientKeyOf("2001:0db8:0000:0001:abcd::9"), key);
  assert.equal(clientKeyOf("2001:db8:0:1:1:2:10.0.0.1"), key);
  assert.equal(clientKeyOf("fe80::1%eth0"), "fe80:0:0:0::/64");
  assert.notEqual(clientKeyOf("2001:db8:0:2::1"), key);
  assert.equal(clientKeyOf("::1"), "0:0:0:0::/64");
});

test("no address is one client", () => {
  assert.equal(clientKeyOf(undefined), "");
});
