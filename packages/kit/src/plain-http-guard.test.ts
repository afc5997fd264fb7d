import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { test } from "node:test";
import { guardPlainHttp } from "./plain-http-guard.js";

async function listen(server: net.Server): Promise<number> {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as net.AddressInfo).port;
}

/** Everything `socket` receives until the peer closes. */
async function readAll(socket: net.Socket): Promise<string> {
  let text = "";
  socket.on("data", (d: Buffer) => (text += d.toString("latin1")));
  await once(socket, "close");
  return text;
}

test("plain HTTP gets a 400 naming the flag at once; other bytes reach the TLS server unread", async () => {
  const tlsServer = tls.createServer({});
  const handed: Buffer[] = [];
  // Stand in for the TLS machinery: record what the TLS server would read.
  tlsServer.removeAllListeners("connection");
  tlsServer.on("connection", (socket: net.Socket) => {
    socket.once("data", (d: Buffer) => {
      handed.push(d);
      socket.destroy();
    });
    socket.resume();
  });
  const guard = guardPlainHttp(tlsServer, { flag: "--port", firstBytesTimeoutMs: 10_000 });
  const port = await listen(guard);
  try {
    const started = Date.now();
    const http = net.connect(port, "127.0.0.1");
    http.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    const answer = await readAll(http);
    assert.ok(Date.now() - started < 1000, `answered in ${Date.now() - started} ms`);
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(answer, /Client sent an HTTP request to an HTTPS server: this port \(--port\) speaks TLS\.\n$/);
    const hello = Buffer.from([0x16, 0x03, 0x01, 0x00, 0x01, 0x01]);
    const tlsClient = net.connect(port, "127.0.0.1");
    tlsClient.write(hello);
    await readAll(tlsClient);
    assert.deepEqual(handed, [hello], "the first bytes are handed over unread");
  } finally {
    guard.close();
  }
});

test("a connection that sends nothing is closed after firstBytesTimeoutMs while others are answered", async () => {
  const tlsServer = tls.createServer({});
  const guard = guardPlainHttp(tlsServer, { flag: "--port", firstBytesTimeoutMs: 300 });
  const port = await listen(guard);
  try {
    const silent = net.connect(port, "127.0.0.1");
    const closed = once(silent, "close");
    const http = net.connect(port, "127.0.0.1");
    http.write("GET / HTTP/1.1\r\n\r\n");
    assert.match(await readAll(http), /400 Bad Request/);
    const started = Date.now();
    await closed;
    assert.ok(Date.now() - started < 5_000, "closed by the guard, not left open");
  } finally {
    guard.close();
  }
});
