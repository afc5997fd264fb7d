import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SseParser, type SseEvent } from "./sse-parser.js";

function all(chunks: string[]): SseEvent[] {
  const p = new SseParser();
  return chunks.flatMap((c) => p.push(c));
}

describe("SseParser", () => {
  it("dispatches an event at a blank line, with its name and data", () => {
    assert.deepEqual(all(['event: snapshot\ndata: {"a":1}\n\n']), [{ event: "snapshot", data: '{"a":1}' }]);
  });

  it("ignores comments (the server's pings) and unknown fields, and joins data lines", () => {
    assert.deepEqual(all([": ping\n\nid: 7\nretry: 10\nevent: detail\ndata: a\ndata: b\n\n"]), [
      { event: "detail", data: "a\nb" },
    ]);
  });

  it("names an event without `event:` message, and keeps a value's colons and inner spaces", () => {
    assert.deepEqual(all(["data:x: y  z\n\n"]), [{ event: "message", data: "x: y  z" }]);
  });

  it("dispatches nothing for an event without data, and resets the name", () => {
    assert.deepEqual(all(["event: snapshot\n\ndata: 1\n\n"]), [{ event: "message", data: "1" }]);
  });

  it("reads CRLF and CR line ends, even split between chunks", () => {
    assert.deepEqual(all(["event: a\r", "\ndata: 1\r\n\r", "\nevent: b\rdata: 2\r\r"]), [
      { event: "a", data: "1" },
      { event: "b", data: "2" },
    ]);
  });

  it("gives the same events whatever the chunking", () => {
    const text = 'event: snapshot\ndata: {"clusters":[]}\n\n: ping\n\nevent: detail\r\ndata: {}\r\n\r\n';
    const whole = all([text]);
    for (let size = 1; size <= 7; size++) {
      const chunks: string[] = [];
      for (let i = 0; i < text.length; i += size) chunks.push(text.slice(i, i + size));
      assert.deepEqual(all(chunks), whole, `chunks of ${size}`);
    }
    assert.equal(whole.length, 2);
  });

  it("holds an unfinished event until its blank line", () => {
    const p = new SseParser();
    assert.deepEqual(p.push("event: snapshot\ndata: 1\n"), []);
    assert.deepEqual(p.push("\n"), [{ event: "snapshot", data: "1" }]);
  });
});
