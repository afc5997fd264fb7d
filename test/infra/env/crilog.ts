// Container output in the CRI log format, as a container runtime writes it for the kubelet:
//   <RFC 3339 time with nanoseconds> <stdout|stderr> <F|P> <content>\n
// one entry per line of output ("F"); a line longer than MAX_LINE is split into "P" (partial)
// entries and the "F" one that ends it. The process kubelet writes them to
// <pod dir>/logs/<container>/<restart count>.log, which the kubelet-api test peer
// (test/infra/k8s/kubelet-api) serves as containerLogs and attach output.
import { StringDecoder } from "node:string_decoder";

/** Longest entry before a line is split (containerd's default buffer is 16 KiB as well). */
export const MAX_LINE = 16 * 1024;

/** 2026-11-26T12:00:00.123000000Z: RFC 3339 with nine fraction digits (Date has milliseconds). */
export function criTimestamp(d: Date): string {
  return `${d.toISOString().slice(0, 23)}000000Z`;
}

export type CriStream = "stdout" | "stderr";

/** Turns chunks of a container's output into CRI log entries, handed to `write` as they complete. */
export class CriLogWriter {
  private readonly pending: Record<CriStream, string> = { stdout: "", stderr: "" };
  /** a UTF-8 character split over two chunks is decoded once complete */
  private readonly decoders: Record<CriStream, StringDecoder> = {
    stdout: new StringDecoder("utf8"),
    stderr: new StringDecoder("utf8"),
  };
  constructor(
    private readonly write: (entry: string) => void,
    private readonly now: () => Date = () => new Date(),
  ) {}

  push(stream: CriStream, chunk: Buffer | string): void {
    let buf = this.pending[stream] + this.decoders[stream].write(Buffer.from(chunk));
    let out = "";
    const ts = criTimestamp(this.now());
    for (;;) {
      const nl = buf.indexOf("\n");
      if (nl < 0) break;
      out += this.entries(ts, stream, buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
    while (buf.length > MAX_LINE) {
      out += `${ts} ${stream} P ${buf.slice(0, MAX_LINE)}\n`;
      buf = buf.slice(MAX_LINE);
    }
    this.pending[stream] = buf;
    if (out) this.write(out);
  }

  /** The output ended: an unterminated last line is written as a full one. */
  end(stream: CriStream): void {
    const buf = this.pending[stream] + this.decoders[stream].end();
    this.pending[stream] = "";
    if (buf) this.write(`${criTimestamp(this.now())} ${stream} F ${buf}\n`);
  }

  private entries(ts: string, stream: CriStream, line: string): string {
    let out = "";
    while (line.length > MAX_LINE) {
      out += `${ts} ${stream} P ${line.slice(0, MAX_LINE)}\n`;
      line = line.slice(MAX_LINE);
    }
    return `${out}${ts} ${stream} F ${line}\n`;
  }
}
