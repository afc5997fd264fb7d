import assert from "node:assert/strict";
import { test } from "node:test";
import { CONNECTION_SPECIFIC_HEADERS, HOP_BY_HOP_HEADERS, connectionOptions } from "./http-headers.js";

test("connection options: every listed name of every Connection header, lowercased, empty tokens skipped", () => {
  assert.deepEqual([...connectionOptions(undefined)], []);
  assert.deepEqual([...connectionOptions(" Keep-Alive ,X-Hop,, ")], ["keep-alive", "x-hop"]);
  assert.deepEqual([...connectionOptions(["close", "Upgrade, x-hop", "X-HOP"])], ["close", "upgrade", "x-hop"]);
});

test("the lists are lowercase; Host is connection-specific but not hop-by-hop", () => {
  for (const name of CONNECTION_SPECIFIC_HEADERS) assert.equal(name, name.toLowerCase());
  assert.equal(HOP_BY_HOP_HEADERS.has("host"), false);
  assert.equal(CONNECTION_SPECIFIC_HEADERS.has("host"), true);
});
