import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DialErrors } from "@cluster-proxy/protocol";
import { DialError } from "@cluster-proxy/tunnel";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { HttpConnectError, dialConnect } from "./connect-dial.js";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";

/**
 * A fake CONNECT door. Answers by target: `ok:1` -> 200 plus pipelined bytes, then echo;
 * `noagent:1` -> 500; `refused:1` -> 502; `old:1` -> 200 then an old server's 503 answer;
 * `hold:1` -> nothing; `draining:1` -> the first {@link drainingAnswers} times our draining
 * server's 503, then as `ok:1`.
 */
let drainingAnswers = 0;
let drainingAsked = 0;
function handleConnect(socket: net.Socket): void {
  let head = "";
  socket.on("error", () => undefined);
  const onData = (chunk: Buffer): void => {
    head += chunk.toString("latin1");
    const end = head.indexOf("\r\n\r\n");
    if (end < 0) return;
    socket.off("data", onData);
    const [line] = head.split("\r\n");
    const target = /^CONNECT (\S+) HTTP\/1\.1$/.exec(line ?? "")?.[1];
    const rest = Buffer.from(head.slice(end + 4), "latin1");
    if (target === "draining:1") {
      drainingAsked++;
      if (drainingAnswers > 0) {
        drainingAnswers--;
        const body = `${DialErrors.serverDraining}\n`;
        socket.end(
          `HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
        );
        return;
      }
    }
    switch (target) {
      case "draining:1":
      case "ok:1":
        socket.write("HTTP/1.1 200 Connection Established\r\n\r\nearly bytes|");
        if (rest.length > 0) socket.write(rest);
        socket.pipe(socket);
        return;
      case "noagent:1": {
        const body = "currently no tunnels available: No agent available";
        socket.end(`HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\n${body}`);
        return;
      }
      case "refused:1":
        socket.end(
          "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" +
            "dial tcp 10.0.0.1:1: connect: connection refused\n",
        );
        return;
      case "old:1":
        socket.end(
          "HTTP/1.1 200 Connection established\r\n\r\n" +
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 18\r\n\r\nno agent available",
        );
        return;
      case "hold:1":
        return;
      default:
        socket.end("HTTP/1.1 400 Bad Request\r\n\r\n");
    }
  };
  socket.on("data", onData);
}

async function listen(server: net.Server, where: string | number): Promise<number> {
  await new Promise<void>((resolve) => {
    if (typeof where === "string") server.listen(where, resolve);
    else server.listen(where, "127.0.0.1", resolve);
  });
  const addr = server.address();
  return addr && typeof addr === "object" ? addr.port : 0;
}

async function readToEnd(socket: net.Socket, want: number): Promise<string> {
  let text = "";
  for await (const chunk of socket) {
    text += (chunk as Buffer).toString();
    if (text.length >= want) break;
  }
  return text;
}

describe("HTTP CONNECT dial", { timeout: 30_000 }, () => {
  let plain: net.Server;
  let plainPort: number;
  let pki: TestPki;
  let secure: tls.Server;
  let securePort: number;
  let dir: string;
  let uds: net.Server;

  before(async () => {
    pki = await createTestPki();
    dir = mkdtempSync(join(tmpdir(), "cp-client-connect-"));
    plain = net.createServer(handleConnect);
    plainPort = await listen(plain, 0);
    secure = tls.createServer(
      { key: pki.serverKey, cert: pki.serverCert, ca: pki.clientCa, requestCert: true, rejectUnauthorized: true },
      handleConnect,
    );
    securePort = await listen(secure, 0);
    uds = net.createServer(handleConnect);
    await listen(uds, join(dir, "connect.sock"));
  });
  after(async () => {
    await Promise.all([plain, secure, uds].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    rmSync(dir, { recursive: true, force: true });
    pki.cleanup();
  });

  test("200: pipelined bytes come first, then the tunnel", async () => {
    const socket = await dialConnect("ok:1", { proxy: { host: "127.0.0.1", port: plainPort } });
    socket.write("hello");
    assert.equal(await readToEnd(socket, "early bytes|hello".length), "early bytes|hello");
    socket.destroy();
  });

  test("200 over mTLS and over a Unix socket", async () => {
    const viaTls = await dialConnect("ok:1", {
      proxy: { host: "localhost", port: securePort, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
    });
    viaTls.write("tls");
    assert.equal(await readToEnd(viaTls, "early bytes|tls".length), "early bytes|tls");
    viaTls.destroy();
    const viaUds = await dialConnect("ok:1", { proxy: { udsPath: join(dir, "connect.sock") } });
    viaUds.write("uds");
    assert.equal(await readToEnd(viaUds, "early bytes|uds".length), "early bytes|uds");
    viaUds.destroy();
  });

  test("a refused TCP connect is reported as such, not as a refused certificate", async () => {
    // Issue 25: ECONNREFUSED on the mTLS door was reported as "closed the connection right after
    // the TLS handshake, so it most likely refused proxy.cert".
    const closed = net.createServer();
    closed.listen(0, "127.0.0.1");
    await once(closed, "listening");
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    await assert.rejects(
      dialConnect("ok:1", { proxy: { host: "127.0.0.1", port, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } }),
      (err: Error) => {
        assert.match(err.message, /ECONNREFUSED.*\(5 connections, none taken\)$/);
        assert.doesNotMatch(err.message, /TLS handshake|proxy\.cert/);
        return true;
      },
    );
  });

  /**
   * A Service in front of the door at `port` whose first `dead` connections reach a replica that
   * just died (reset as soon as accepted); the rest reach the door. Counts the connections.
   */
  const withService = async (
    dead: number,
    port: number,
    use: (front: { port: number; connections: number }) => Promise<void>,
  ): Promise<void> => {
    const front = { port: 0, connections: 0 };
    const server = net.createServer((socket) => {
      front.connections++;
      if (front.connections <= dead) {
        socket.resetAndDestroy();
        return;
      }
      const door = net.connect(port, "127.0.0.1");
      socket.pipe(door).pipe(socket);
      door.on("error", () => socket.destroy());
      socket.on("error", () => door.destroy());
    });
    front.port = await listen(server, 0);
    try {
      await use(front);
    } finally {
      server.close();
    }
  };

  test("a connection no proxy server takes is made again (mTLS: reset before the handshake ended), up to 5", async () => {
    const proxy = { host: "localhost", ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
    await withService(4, securePort, async (front) => {
      const socket = await dialConnect("ok:1", { proxy: { ...proxy, port: front.port } });
      assert.equal(front.connections, 5, "four connections reset, the fifth reached the door");
      socket.write("live");
      assert.equal(await readToEnd(socket, "early bytes|live".length), "early bytes|live");
      socket.destroy();
    });
    await withService(Infinity, securePort, async (front) => {
      await assert.rejects(dialConnect("ok:1", { proxy: { ...proxy, port: front.port } }), (err: unknown) => {
        assert.ok(err instanceof DialError, String(err));
        assert.match(err.message, /\(5 connections, none taken\)$/);
        return true;
      });
      assert.equal(front.connections, 5);
    });
  });

  test("over plain TCP a connection reset once it was up is not made again: the CONNECT may have gone out", async () => {
    let connections = 0;
    // A door that reads the CONNECT, then resets.
    const server = net.createServer((socket) => {
      connections++;
      socket.once("data", () => socket.resetAndDestroy());
    });
    const port = await listen(server, 0);
    try {
      await assert.rejects(dialConnect("ok:1", { proxy: { port } }), DialError);
      assert.equal(connections, 1);
    } finally {
      server.close();
    }
    // Reset before the connection was up (the kernel's handshake done, the door gone): nothing
    // was sent, so it is made again.
    await withService(Infinity, plainPort, async (front) => {
      await assert.rejects(dialConnect("ok:1", { proxy: { port: front.port } }), /\(5 connections, none taken\)$/);
      assert.equal(front.connections, 5);
    });
  });

  test("connecting again ends at the dial's deadline, as a timeout", async () => {
    const server = net.createServer((socket) => void setTimeout(() => socket.resetAndDestroy(), 900));
    const port = await listen(server, 0);
    const started = Date.now();
    try {
      await assert.rejects(
        dialConnect("ok:1", {
          proxy: { host: "localhost", port, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
          // Resets at 0.9, 1.85 and 2.85 s: the 400 ms pause after the third runs into the deadline.
          timeoutMs: 3_000,
        }),
        (err: unknown) => {
          assert.ok(err instanceof DialError && err.reason === "timeout", String(err));
          return true;
        },
      );
      assert.ok(Date.now() - started < 3_000 + 1_000, `${Date.now() - started} ms`);
    } finally {
      server.close();
    }
  });

  test("a door that ends the connection before the TLS handshake: an error saying so, never an unhandled one", async () => {
    const server = net.createServer((socket) => socket.end());
    const port = await listen(server, 0);
    try {
      await assert.rejects(
        dialConnect("ok:1", {
          proxy: { host: "localhost", port, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
          tlsSessions: false,
        }),
        (err: Error) =>
          err instanceof DialError &&
          !/right after the TLS handshake/.test(err.message) &&
          /before the TLS handshake ended|before secure TLS connection/.test(err.message),
      );
      // The error node queues for such a socket comes a turn later.
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    } finally {
      server.close();
    }
  });

  test("a draining server's 503 is sent once more on a new connection, only once; no other answer is", async () => {
    drainingAnswers = 1;
    drainingAsked = 0;
    const socket = await dialConnect("draining:1", { proxy: { port: plainPort } });
    assert.equal(drainingAsked, 2, "the retry went out on a second connection");
    socket.destroy();
    drainingAnswers = 2;
    drainingAsked = 0;
    await assert.rejects(dialConnect("draining:1", { proxy: { port: plainPort } }), (err: unknown) => {
      assert.ok(err instanceof HttpConnectError);
      assert.equal(err.statusCode, 503);
      assert.equal(err.body, DialErrors.serverDraining);
      return true;
    });
    assert.equal(drainingAsked, 2, "two attempts, no third");
    drainingAnswers = 0;
  });

  test("500 no agent: status and body", async () => {
    await assert.rejects(dialConnect("noagent:1", { proxy: { port: plainPort } }), (err: unknown) => {
      assert.ok(err instanceof HttpConnectError);
      assert.ok(err instanceof DialError);
      assert.equal(err.statusCode, 500);
      assert.equal(err.body, "currently no tunnels available: No agent available");
      assert.match(err.message, /500.*No agent available/);
      return true;
    });
  });

  test("502 with the agent's error text", async () => {
    await assert.rejects(dialConnect("refused:1", { proxy: { port: plainPort } }), (err: unknown) => {
      assert.ok(err instanceof HttpConnectError);
      assert.equal(err.statusCode, 502);
      assert.match(err.body, /connection refused/);
      return true;
    });
  });

  test("an old server's 200 followed by 503 is a failure", async () => {
    await assert.rejects(dialConnect("old:1", { proxy: { port: plainPort } }), (err: unknown) => {
      assert.ok(err instanceof HttpConnectError);
      assert.equal(err.statusCode, 503);
      assert.equal(err.body, "no agent available");
      return true;
    });
  });

  test("timeout and abort", async () => {
    const clock = new ManualClock();
    let timedOut = false;
    const held = dialConnect("hold:1", { proxy: { port: plainPort }, timeoutMs: 200, clock });
    held.catch(() => (timedOut = true));
    clock.advance(199);
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
    assert.equal(timedOut, false, "not before the timeout of the injected clock");
    clock.advance(1);
    await assert.rejects(held, { reason: "timeout" });
    const controller = new AbortController();
    const dialing = dialConnect("hold:1", { proxy: { port: plainPort }, signal: controller.signal });
    controller.abort();
    await assert.rejects(dialing, { reason: "context" });
  });

  test("a TLS port's 400 to plain HTTP (ours and Go's net/http) says wrong port or protocol", async () => {
    const tlsPort = net.createServer((s) => {
      s.on("error", () => undefined);
      s.once("data", () =>
        s.end(
          "HTTP/1.1 400 Bad Request\r\nContent-Length: 48\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
        ),
      );
    });
    const port = await listen(tlsPort, 0);
    try {
      await assert.rejects(dialConnect("ok:1", { proxy: { port } }), (err: unknown) => {
        assert.ok(err instanceof DialError);
        assert.match(
          err.message,
          /wrong port or protocol: proxy .* speaks TLS .*give proxy\.ca, proxy\.cert and proxy\.key/,
        );
        return true;
      });
    } finally {
      tlsPort.close();
    }
  });

  test("an address without a port is refused before connecting", async () => {
    await assert.rejects(dialConnect("east", { proxy: { port: plainPort } }), DialError);
  });
});
