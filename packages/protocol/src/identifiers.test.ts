import { test } from "node:test";
import assert from "node:assert/strict";
import { formatAgentIdentifiers, parseAgentIdentifiers, parseQuery, validateAgentIdentifiers } from "./identifiers.js";

test("parses the identifiers cluster-proxy agents send", () => {
  const ids = parseAgentIdentifiers(
    "host=east&host=east.ns&ipv4=10.0.0.1&ipv6=fd00%3A%3A1&cidr=10.0.0.0/8&default-route=true",
  );
  assert.deepEqual(ids.host, ["east", "east.ns"]);
  assert.deepEqual(ids.ipv4, ["10.0.0.1"]);
  assert.deepEqual(ids.ipv6, ["fd00::1"]);
  assert.deepEqual(ids.cidr, ["10.0.0.0/8"]);
  assert.equal(ids.defaultRoute, true);
});

test("Go url.ParseQuery rules: ; is an error, + is space, bad escapes fail, empty pairs skipped", () => {
  assert.throws(() => parseQuery("host=a;host=b"), /semicolon/);
  assert.throws(() => parseQuery("host=%zz"), /escape/);
  assert.deepEqual(
    parseQuery("a=b+c&&d"),
    new Map([
      ["a", ["b c"]],
      ["d", [""]],
    ]),
  );
  assert.equal(parseAgentIdentifiers("").host.length, 0);
});

test("default-route: first value, strconv.ParseBool; bad values are false at the server", () => {
  assert.equal(parseAgentIdentifiers("default-route=1").defaultRoute, true);
  assert.equal(parseAgentIdentifiers("default-route=yes").defaultRoute, false);
  assert.throws(() => validateAgentIdentifiers("default-route=yes"), /not a boolean/);
});

test("the agent refuses unknown identifier kinds, the server ignores them", () => {
  assert.throws(() => validateAgentIdentifiers("hots=a"), /unknown identifier type "hots"/);
  assert.deepEqual(parseAgentIdentifiers("hots=a&host=b").host, ["b"]);
});

test("format and parse round-trip", () => {
  const s = formatAgentIdentifiers({ host: ["1east", "a b"], ipv6: ["fd00::1"], defaultRoute: true });
  const ids = parseAgentIdentifiers(s);
  assert.deepEqual(ids.host, ["1east", "a b"]);
  assert.deepEqual(ids.ipv6, ["fd00::1"]);
  assert.equal(ids.defaultRoute, true);
});
