import assert from "node:assert/strict";
import { test } from "node:test";
import { CriLogWriter, MAX_LINE, criTimestamp } from "../infra/env/crilog.js";

const at = new Date("2026-11-26T12:00:00.123Z");
const TS = "2026-11-26T12:00:00.123000000Z";

test("criTimestamp has nine fraction digits", () => {
  assert.equal(criTimestamp(at), TS);
});

test("complete lines become F entries, per stream, as they arrive", () => {
  const out: string[] = [];
  const w = new CriLogWriter(
    (e) => out.push(e),
    () => at,
  );
  w.push("stdout", "a\nb");
  assert.deepEqual(out, [`${TS} stdout F a\n`]);
  w.push("stderr", "e\n");
  w.push("stdout", "c\n\n");
  assert.deepEqual(out.slice(1), [`${TS} stderr F e\n`, `${TS} stdout F bc\n${TS} stdout F \n`]);
  w.push("stdout", "tail");
  w.end("stdout");
  w.end("stderr");
  assert.equal(out.at(-1), `${TS} stdout F tail\n`);
  assert.equal(out.length, 4);
});

test("long lines are split into P entries ending with an F entry", () => {
  const out: string[] = [];
  const w = new CriLogWriter(
    (e) => out.push(e),
    () => at,
  );
  w.push("stdout", `${"x".repeat(MAX_LINE + 5)}\n`);
  assert.deepEqual(out, [`${TS} stdout P ${"x".repeat(MAX_LINE)}\n${TS} stdout F xxxxx\n`]);
  out.length = 0;
  w.push("stderr", "y".repeat(MAX_LINE + 1));
  assert.deepEqual(out, [`${TS} stderr P ${"y".repeat(MAX_LINE)}\n`]);
});

test("a character split over two chunks is kept whole", () => {
  const out: string[] = [];
  const w = new CriLogWriter(
    (e) => out.push(e),
    () => at,
  );
  const b = Buffer.from("é\n");
  w.push("stdout", b.subarray(0, 1));
  w.push("stdout", b.subarray(1));
  assert.deepEqual(out, [`${TS} stdout F é\n`]);
});
