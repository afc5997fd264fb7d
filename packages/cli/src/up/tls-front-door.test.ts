import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { startTlsFrontDoor, type TlsFrontDoor } from "./tls-front-door.js";

let pki: TestPki;
let echo: net.Server;
let echoPort = 0;

before(async () => {
  pki = await createTestPki();
  echo = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on("error", () => undefined);
    s.pipe(s);
  });
  echo.listen(0, "127.0.0.1");
  await once(echo, "listening");
  echoPort = (echo.address() as net.AddressInfo).port;
});
after(() => {
  echo.close();
  pki.cleanup();
});

function startDoor(): Promise<TlsFrontDoor> {
  return startTlsFrontDoor({
    host: "127.0.0.1",
    port: 0,
    cert: pki.serverCert,
    key: pki.serverKey,
    ca: pki.clientCa,
    target: { host: "127.0.0.1", port: echoPort },
  });
}

/** Resolves with how long `p` took; rejects after `ms`. */
async function within(p: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      p,
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} after ${ms} ms`)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

test("a client that refuses the door's certificate leaves no socket behind; close() completes", async () => {
  // Issue 25: with allowHalfOpen on the TLS server, the client's FIN during the handshake left the
  // server's socket in CLOSE-WAIT, and close() waited for it (minutes: node's handshake timeout).
  const door = await startDoor();
  for (let i = 0; i < 3; i++) {
    const c = tls.connect({
      host: "127.0.0.1",
      port: door.port,
      ca: pki.agentCa,
      cert: pki.clientCert,
      key: pki.clientKey,
    });
    const [err] = (await once(c, "error")) as [Error];
    assert.match(err.message, /verify|self-signed|issuer/);
  }
  // A silent TCP connection too: no handshake at all.
  const silent = net.connect(door.port, "127.0.0.1");
  silent.on("error", () => undefined);
  await once(silent, "connect");
  try {
    await within(door.close(), 5000, "close() still running");
  } finally {
    silent.destroy();
  }
});

test("half-close still works: the client ends its side and gets the rest of the answer", async () => {
  const door = await startDoor();
  try {
    const c = tls.connect({
      host: "127.0.0.1",
      port: door.port,
      ca: pki.ca,
      cert: pki.clientCert,
      key: pki.clientKey,
      servername: "localhost",
    });
    await once(c, "secureConnect");
    let got = "";
    c.on("data", (d: Buffer) => (got += d.toString()));
    c.end("hello, then EOF");
    await once(c, "end");
    assert.equal(got, "hello, then EOF");
    c.destroy();
  } finally {
    await door.close();
  }
});

test("plain HTTP gets a 400 naming the port within 1 s; mTLS clients still get through", async () => {
  const door = await startDoor();
  try {
    const started = Date.now();
    const http = net.connect(door.port, "127.0.0.1");
    let answer = "";
    http.on("data", (d: Buffer) => (answer += d.toString()));
    http.write("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await within(
      once(http, "close").then(() => undefined),
      1000,
      "no answer",
    );
    assert.ok(Date.now() - started < 1000);
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request/);
    assert.match(answer, /this port \(--port-base \+ 13\) speaks TLS/);
    const client = tls.connect({
      host: "127.0.0.1",
      port: door.port,
      ca: pki.ca,
      cert: pki.clientCert,
      key: pki.clientKey,
      servername: "localhost",
    });
    await once(client, "secureConnect");
    const echoed = once(client, "data");
    client.write("ping");
    assert.equal(String((await echoed)[0]), "ping");
    client.destroy();
  } finally {
    await door.close();
  }
});
