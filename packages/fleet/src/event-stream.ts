/**
 * One server-sent event stream to one viewer: events are written as `event:`/`data:` lines, a
 * `: ping` comment keeps quiet connections alive, and a viewer that does not read is cut once
 * more than `maxBufferedBytes` wait to be sent (what it has not read is never held without bound).
 */

/** The response side of a stream (node:http or the HTTP/2 compatibility API). */
export interface StreamResponse {
  write(chunk: string): boolean;
  end(): unknown;
  destroy(): unknown;
  once(event: "drain", listener: () => void): unknown;
}

/** See the module comment. */
export class EventStream {
  private waiting = 0;
  private draining = false;
  private closed = false;
  private readonly ping: NodeJS.Timeout;

  constructor(
    private readonly res: StreamResponse,
    private readonly maxBufferedBytes: number,
    pingMs: number,
    private readonly onClose: () => void,
  ) {
    this.ping = setInterval(() => this.write(": ping\n\n"), pingMs);
    this.ping.unref();
  }

  /** Send event `name` with `data` as JSON. */
  send(name: string, data: unknown): void {
    this.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** Whether the stream ended (by {@link close}, the viewer or a cut). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** End the stream (`cut`: destroy it without flushing). */
  close(cut = false): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.ping);
    if (cut) this.res.destroy();
    else this.res.end();
    this.onClose();
  }

  private write(chunk: string): void {
    if (this.closed) return;
    if (this.draining) {
      this.waiting += Buffer.byteLength(chunk);
      if (this.waiting > this.maxBufferedBytes) {
        this.close(true);
        return;
      }
    }
    if (!this.res.write(chunk) && !this.draining) {
      this.draining = true;
      this.res.once("drain", () => {
        this.draining = false;
        this.waiting = 0;
      });
    }
  }
}
