/**
 * Server-sent events, parsed by hand (the page reads the stream with `fetch` so that it can send
 * an `Authorization` header, which `EventSource` cannot): `event:` and `data:` fields, an event
 * ends at a blank line, lines starting with `:` are comments. Lines end with LF, CRLF or CR, and
 * a chunk may end anywhere, even between a CR and its LF.
 */

/** One dispatched event. */
export interface SseEvent {
  /** The `event:` field; "message" when the event had none. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
}

/** Turns chunks of an event stream's text into events. */
export class SseParser {
  private buffer = "";
  private event = "";
  private data: string[] = [];
  private afterCr = false;

  /** Feed the next chunk of text; answers the events it completed. */
  push(chunk: string): SseEvent[] {
    let text = chunk;
    if (this.afterCr && text.startsWith("\n")) text = text.slice(1);
    this.afterCr = false;
    this.buffer += text;
    const out: SseEvent[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buffer);
      if (m === null) break;
      // A CR at the very end may be the first half of a CRLF split across chunks.
      if (m[0] === "\r" && m.index === this.buffer.length - 1) this.afterCr = true;
      const line = this.buffer.slice(0, m.index);
      this.buffer = this.buffer.slice(m.index + m[0].length);
      const ev = this.line(line);
      if (ev !== undefined) out.push(ev);
    }
    return out;
  }

  private line(line: string): SseEvent | undefined {
    if (line === "") {
      if (this.data.length === 0) {
        this.event = "";
        return undefined;
      }
      const ev = { event: this.event === "" ? "message" : this.event, data: this.data.join("\n") };
      this.event = "";
      this.data = [];
      return ev;
    }
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    return undefined;
  }
}
