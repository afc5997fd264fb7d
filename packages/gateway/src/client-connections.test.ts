/** Which client a connection counts against; silent HTTP/1.1 connections closed on the injected clock. */
import assert from "node:assert/strict";
import { Socket } from "node:net";
import { test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { SilentConnections, clientKeyOf } from "./client-connections.js";

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

test("an HTTP/1.1 connection that begins no request is closed after the idle time of the injected clock", () => {
  const clock = new ManualClock();
  const silent = new SilentConnections(1_000, clock);
  const quiet = new Socket();
  const speaking = new Socket();
  silent.accepted(quiet);
  silent.accepted(speaking);
  silent.began(speaking);
  clock.advance(999);
  assert.equal(quiet.destroyed, false, "not before the idle time");
  clock.advance(1);
  assert.equal(quiet.destroyed, true, "closed at the idle time");
  assert.equal(speaking.destroyed, false, "a connection that began a request stays");
  speaking.destroy();
});
