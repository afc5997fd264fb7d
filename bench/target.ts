/**
 * The benchmark's target process (what the tunnel dials). Two TCP ports on --host:
 * - echo: every byte is written back (latency, first byte, dial rate, idle connections).
 * - bulk: the first line picks the mode. `sink <n>\n` reads n bytes and answers `ok\n`;
 *   `source <n>\n` writes n bytes and closes; `stream\n` writes until the peer closes
 *   (at most 120 s). Payload bytes are a preallocated buffer: the target must not be the limit.
 * Prints `{"echo":<port>,"bulk":<port>}` on stdout when listening. Runs until killed.
 */
import { once } from "node:events";
import * as net from "node:net";

const host = process.argv[2] ?? "127.0.0.1";
const CHUNK = Buffer.alloc(256 * 1024, 0x5a);
const STREAM_LIMIT_MS = 120_000;

const echo = net.createServer((s) => {
  s.setNoDelay(true);
  s.on("error", () => undefined);
  s.pipe(s);
});

function pump(s: net.Socket, total: number, deadline: number): void {
  let sent = 0;
  const more = (): void => {
    while (sent < total && !s.destroyed) {
      if (Date.now() > deadline) return void s.destroy();
      const n = Math.min(CHUNK.length, total - sent);
      sent += n;
      if (!s.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) return void s.once("drain", more);
    }
    if (sent >= total) s.end();
  };
  more();
}

const bulk = net.createServer((s) => {
  s.on("error", () => undefined);
  let head: Buffer = Buffer.alloc(0);
  const onHead = (chunk: Buffer): void => {
    head = head.length ? Buffer.concat([head, chunk]) : chunk;
    const nl = head.indexOf(10);
    if (nl < 0) return;
    s.off("data", onHead);
    const [mode, arg] = head.subarray(0, nl).toString().split(" ");
    const rest = head.length - nl - 1;
    if (mode === "sink") {
      const want = Number(arg);
      let got = rest;
      if (got >= want) return void s.write("ok\n");
      const take = (c: Buffer): void => {
        got += c.length;
        if (got >= want) {
          s.off("data", take);
          s.write("ok\n");
        }
      };
      s.on("data", take);
    } else if (mode === "source") {
      pump(s, Number(arg), Date.now() + STREAM_LIMIT_MS);
    } else if (mode === "stream") {
      pump(s, Number.MAX_SAFE_INTEGER, Date.now() + STREAM_LIMIT_MS);
    } else {
      s.destroy();
    }
  };
  s.on("data", onHead);
});

for (const srv of [echo, bulk]) {
  srv.maxConnections = 60_000;
  srv.listen({ port: 0, host, backlog: 4096 });
  await once(srv, "listening");
}
const port = (srv: net.Server): number => (srv.address() as net.AddressInfo).port;
process.stdout.write(`${JSON.stringify({ echo: port(echo), bulk: port(bulk) })}\n`);
