import { test } from "node:test";
import assert from "node:assert/strict";
import { planTicketKeys, ticketKeysOf, TICKET_KEYS_FILE, TICKET_KEYS_ROTATED_AT } from "./ticket-keys-secret.js";

const HOUR = 3_600_000;
let n = 0;
/** Distinct, recognisable 48-byte keys. */
const key = (): Buffer => Buffer.alloc(48, ++n);
const lines = (file: string): Buffer[] =>
  file
    .trim()
    .split("\n")
    .map((l) => Buffer.from(l, "base64"));

test("ticket keys: created, kept for a period, then rotated with the old key kept one more period", () => {
  const t0 = Date.parse("2026-01-01T00:00:00Z");
  const created = planTicketKeys(undefined, t0, 12 * HOUR, key);
  assert.equal(created.change, "created");
  const [k1] = lines(created.file);
  assert.equal(k1?.length, 48);
  assert.equal(lines(created.file).length, 1);

  const state = { file: created.file, rotatedAt: created.rotatedAt.toISOString() };
  const within = planTicketKeys(state, t0 + 11 * HOUR, 12 * HOUR, key);
  assert.equal(within.change, undefined);
  assert.equal(within.file, created.file);
  assert.equal(within.recheckMs, HOUR, "looks again when the period ends");

  const rotated = planTicketKeys(state, t0 + 12 * HOUR, 12 * HOUR, key);
  assert.equal(rotated.change, "rotated");
  const [k2, previous] = lines(rotated.file);
  assert.notDeepEqual(k2, k1);
  assert.deepEqual(previous, k1, "the replaced key stays second for one period");

  const again = planTicketKeys(
    { file: rotated.file, rotatedAt: rotated.rotatedAt.toISOString() },
    t0 + 24 * HOUR,
    12 * HOUR,
    key,
  );
  const keys = lines(again.file);
  assert.equal(keys.length, 2);
  assert.deepEqual(keys[1], k2);
  assert.ok(!keys.some((k) => k.equals(k1)), "a key two rotations old is gone");
});

test("ticket keys: a Secret without a readable key or date is re-made", () => {
  const t0 = Date.now();
  assert.equal(planTicketKeys({ file: "garbage\n", rotatedAt: undefined }, t0, HOUR, key).change, "created");
  const fine = planTicketKeys(undefined, t0, HOUR, key);
  assert.equal(planTicketKeys({ file: fine.file, rotatedAt: "not a date" }, t0, HOUR, key).change, "rotated");
  assert.equal(
    planTicketKeys({ file: fine.file, rotatedAt: new Date(t0 + HOUR).toISOString() }, t0, HOUR, key).change,
    "rotated",
    "a date in the future is not trusted",
  );
  const decoded = ticketKeysOf({
    metadata: { name: "s", annotations: { [TICKET_KEYS_ROTATED_AT]: "2026-01-01T00:00:00.000Z" } },
    data: { [TICKET_KEYS_FILE]: Buffer.from(fine.file).toString("base64") },
  });
  assert.deepEqual(decoded, { file: fine.file, rotatedAt: "2026-01-01T00:00:00.000Z" });
});
