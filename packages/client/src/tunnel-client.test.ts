import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { EventEmitter, once } from "node:events";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DialErrors, PacketType, MAX_DATA_CHUNK } from "@cluster-proxy/protocol";
import * as net from "node:net";
import { ConnectError, DialError, TunnelClosedError } from "@cluster-proxy/tunnel";
import { TunnelClient, dial } from "./tunnel-client.js";
import { newDialRandom } from "./proxy-call.js";
import type { TunnelSocket } from "./tunnel-socket.js";
import type { TunnelClientOptions } from "./options.js";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { FakeProxyServer, type ReceivedPacket } from "./testing/fake-proxy-server.js";

/** Read a socket to EOF. */
async function readAll(socket: TunnelSocket): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of socket) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

const dialReqOf = (p: ReceivedPacket): bigint | undefined =>
  "dialRequest" in p.packet ? p.packet.dialRequest.random : undefined;

describe("gRPC dial through a fake hub", { timeout: 60_000 }, () => {
  let pki: TestPki;
  let fake: FakeProxyServer;
  let options: TunnelClientOptions;

  before(async () => {
    pki = await createTestPki();
    fake = await new FakeProxyServer({ pki }).start();
    options = {
      proxy: { host: "localhost", port: fake.port, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
    };
  });
  after(async () => {
    await fake.close();
    pki.cleanup();
  });

  /** Run `use` with a TunnelClient on the fake hub, closed afterwards whatever happens. */
  const withClient = async (use: (client: TunnelClient) => Promise<void>): Promise<void> => {
    const client = new TunnelClient(options);
    try {
      await use(client);
    } finally {
      await client.close();
    }
  };

  test("single-use dial echoes 8 MiB byte-exact; end() sends CLOSE_REQ, EOF after CLOSE_RSP, session closed", async () => {
    const closedBefore = fake.sessionsClosed;
    const socket = await dial("echo.east:443", options);
    assert.equal(socket.address, "echo.east:443");
    assert.equal(socket.remoteAddress, "echo.east");
    assert.equal(socket.remotePort, 443);
    assert.equal(typeof socket.connectID, "bigint");
    const payload = randomBytes(8 * 1024 * 1024);
    const reading = readAll(socket);
    // Several write sizes, including one far above the chunk size.
    socket.write(payload.subarray(0, 1));
    socket.write(payload.subarray(1, 100_000));
    socket.end(payload.subarray(100_000));
    const echoed = await reading;
    assert.equal(echoed.length, payload.length);
    assert.ok(echoed.equals(payload), "echo is byte-exact");
    const closeReq = await fake.waitForPacket(
      (p) => "closeRequest" in p.packet && p.packet.closeRequest.connectID === socket.connectID,
    );
    assert.equal(closeReq.packet.type, PacketType.CLOSE_REQ);
    const dataPackets = fake.received.filter((p) => p.callId === closeReq.callId && p.packet.type === PacketType.DATA);
    const biggest = Math.max(...dataPackets.map((p) => ("data" in p.packet ? p.packet.data.data.length : 0)));
    assert.ok(biggest <= MAX_DATA_CHUNK, `DATA payload of ${biggest} bytes`);
    assert.ok(dataPackets.every((p) => p.messageBytes < 4 * 1024 * 1024));
    // CLOSE_REQ came after all DATA.
    const lastData = fake.received.lastIndexOf(dataPackets[dataPackets.length - 1]!);
    assert.ok(fake.received.indexOf(closeReq) > lastData);
    await fake.waitForSessionsClosed(closedBefore + 1);
    if (!socket.closed) await once(socket, "close");
  });

  test("DIAL_RSP error text is passed through verbatim (reason endpoint) and the session is closed", async () => {
    const closedBefore = fake.sessionsClosed;
    await assert.rejects(dial("noagent:1", options), (err: unknown) => {
      assert.ok(err instanceof DialError);
      assert.equal(err.message, "No agent available");
      assert.equal(err.reason, "endpoint");
      return true;
    });
    await fake.waitForSessionsClosed(closedBefore + 1);
  });

  test("a dial the server refuses as draining is sent once more on a new connection", async () => {
    fake.drainingRefusals = 1;
    const opened = fake.sessionsOpened;
    await withClient(async (client) => {
      const socket = await client.dial("draining:1");
      assert.equal(fake.sessionsOpened, opened + 2, "the retry went out on a new connection");
      const dialled = fake.received.filter(
        (p) => "dialRequest" in p.packet && p.packet.dialRequest.address === "draining:1",
      );
      assert.ok(dialled.length >= 2);
      socket.end("after the retry");
      assert.equal((await readAll(socket)).toString(), "after the retry");
    });
    // The single-use dial() retries too, and is not closed between its attempts.
    fake.drainingRefusals = 1;
    const socket = await dial("draining:1", options);
    socket.end("single use");
    assert.equal((await readAll(socket)).toString(), "single use");
  });

  test("only once: a second draining refusal fails the dial; other refusals are never retried", async () => {
    fake.drainingRefusals = 2;
    await withClient(async (client) => {
      await assert.rejects(client.dial("draining:1"), (err: unknown) => {
        assert.ok(err instanceof DialError);
        assert.equal(err.message, DialErrors.serverDraining);
        return true;
      });
      assert.equal(fake.drainingRefusals, 0, "two attempts, no third");
      const before = fake.received.filter(
        (p) => "dialRequest" in p.packet && p.packet.dialRequest.address === "noagent:1",
      ).length;
      await assert.rejects(client.dial("noagent:1"), /No agent available/);
      const after = fake.received.filter(
        (p) => "dialRequest" in p.packet && p.packet.dialRequest.address === "noagent:1",
      ).length;
      assert.equal(after - before, 1, "No agent available is not retried");
    });
    fake.drainingRefusals = 0;
  });

  test("timeout sends DIAL_CLS with the dial's random (reason timeout)", async () => {
    const closedBefore = fake.sessionsClosed;
    const seen = fake.received.length;
    await assert.rejects(dial("hold:1", { ...options, dialTimeoutMs: 300 }), (err: unknown) => {
      assert.ok(err instanceof DialError);
      assert.equal(err.reason, "timeout");
      return true;
    });
    const req = await fake.waitForPacket((p) => fake.received.indexOf(p) >= seen && dialReqOf(p) !== undefined);
    const cls = await fake.waitForPacket((p) => "closeDial" in p.packet && p.callId === req.callId);
    assert.ok("closeDial" in cls.packet);
    assert.equal(cls.packet.closeDial.random, dialReqOf(req));
    await fake.waitForSessionsClosed(closedBefore + 1);
  });

  test("abort sends DIAL_CLS (reason context)", async () => {
    const seen = fake.received.length;
    const controller = new AbortController();
    const dialing = dial("hold:1", { ...options, signal: controller.signal });
    const req = await fake.waitForPacket((p) => fake.received.indexOf(p) >= seen && dialReqOf(p) !== undefined);
    controller.abort(new Error("user gave up"));
    await assert.rejects(dialing, (err: unknown) => {
      assert.ok(err instanceof DialError);
      assert.equal(err.reason, "context");
      assert.match(err.message, /user gave up/);
      return true;
    });
    const cls = await fake.waitForPacket((p) => "closeDial" in p.packet && p.callId === req.callId);
    assert.ok("closeDial" in cls.packet && cls.packet.closeDial.random === dialReqOf(req));
  });

  test("an already aborted signal rejects without dialling", async () => {
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(dial("echo:1", { ...options, signal: controller.signal }), { reason: "context" });
  });

  test("int64 randoms: sent exactly, matched on all 64 bits", async () => {
    await withClient(async (client) => {
      // A DIAL_RSP differing in the lowest bit only is ignored (a Number compare could not tell).
      const socket = await client.dial("decoy:1");
      const req = await fake.waitForPacket((p) => dialReqOf(p) === socket.dialRandom);
      assert.equal(dialReqOf(req), socket.dialRandom);
      socket.destroy();
      let above = 0;
      for (let i = 0; i < 16 && above === 0; i++) {
        const s = await client.dial("echo:1");
        const r = await fake.waitForPacket((p) => dialReqOf(p) === s.dialRandom);
        if (dialReqOf(r)! > 2n ** 53n) above++;
        s.destroy();
      }
      assert.ok(above > 0, "a random above 2^53 went over the wire intact");
    });
  });

  test("newDialRandom is a non-zero non-negative int64", () => {
    let big = 0;
    for (let i = 0; i < 1000; i++) {
      const r = newDialRandom();
      assert.ok(r > 0n && r < 2n ** 63n);
      if (r > 2n ** 53n) big++;
    }
    assert.ok(big > 900);
  });

  test("reusable client: 20 dials share one TLS connection", async () => {
    const tlsBefore = fake.tlsConnections;
    await withClient(async (client) => {
      const sockets = await Promise.all(Array.from({ length: 20 }, (_, i) => client.dial(`echo${i}:80`)));
      assert.equal(new Set(sockets.map((s) => s.connectID)).size, 20);
      await Promise.all(
        sockets.map(async (s, i) => {
          const reading = readAll(s);
          s.end(`hello ${i}`);
          assert.equal((await reading).toString(), `hello ${i}`);
        }),
      );
      const again = await client.dial("echo:1");
      again.destroy();
      assert.equal(fake.tlsConnections - tlsBefore, 1);
    });
  });

  test("destroy() sends CLOSE_REQ", async () => {
    await withClient(async (client) => {
      const socket = await client.dial("echo:1");
      socket.destroy();
      await fake.waitForPacket(
        (p) => "closeRequest" in p.packet && p.packet.closeRequest.connectID === socket.connectID,
      );
    });
  });

  test("backpressure: a reader that stops pushes back on the writer; all bytes arrive once it reads", async () => {
    await withClient(async (client) => {
      const socket = await client.dial("echo:1");
      const chunk = randomBytes(1024 * 1024);
      const total = 64;
      let sent = 0;
      let refused = 0;
      // Nobody reads: HTTP/2 windows (16 MiB each way) and buffers fill, then writes stall.
      const writer = (async () => {
        for (; sent < total; sent++) {
          if (!socket.write(chunk)) {
            refused++;
            await once(socket, "drain");
          }
        }
        socket.end();
      })();
      await fake.waitForPacket(() => fake.pushedBack > 0); // the echo side was pushed back
      assert.ok(sent < total, "writer stalled while nobody read");
      let received = 0;
      let mismatch = false;
      for await (const part of socket) {
        const b = part as Buffer;
        for (let off = 0; off < b.length; off += 4096) {
          const at = (received + off) % chunk.length;
          const n = Math.min(4096, b.length - off, chunk.length - at);
          if (!b.subarray(off, off + n).equals(chunk.subarray(at, at + n))) mismatch = true;
        }
        received += b.length;
      }
      await writer;
      assert.ok(refused > 0);
      assert.equal(received, total * chunk.length);
      assert.equal(mismatch, false);
    });
  });

  test("a tunnel that dies destroys the socket with TunnelClosedError; the client reconnects", async () => {
    await withClient(async (client) => {
      const socket = await client.dial("echo:1");
      const errored = once(socket, "error");
      fake.destroySessions();
      const [err] = (await errored) as [unknown];
      assert.ok(err instanceof TunnelClosedError);
      const again = await client.dial("echo:1");
      const reading = readAll(again);
      again.end("still works");
      assert.equal((await reading).toString(), "still works");
    });
  });

  test("the proxy being unreachable rejects", async () => {
    await assert.rejects(dial("echo:1", { proxy: { host: "127.0.0.1", port: 1, ca: pki.ca } }), (err: unknown) => {
      assert.ok(err instanceof ConnectError && err.unreached, String(err));
      assert.match(err.message, /ECONNREFUSED.*\(5 connections, none taken\)/);
      return true;
    });
  });

  /**
   * A Service in front of the fake hub whose first `dead` connections reach a replica that just
   * died (reset before any TLS byte); the rest reach the hub. Counts the connections it got.
   */
  const withService = async (dead: number, use: (port: number, front: { connections: number }) => Promise<void>) => {
    const front = { connections: 0 };
    const server = net.createServer((socket) => {
      front.connections++;
      if (front.connections <= dead) {
        socket.resetAndDestroy();
        return;
      }
      const hub = net.connect(fake.port, "127.0.0.1");
      socket.pipe(hub).pipe(socket);
      hub.on("error", () => socket.destroy());
      socket.on("error", () => hub.destroy());
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    try {
      await use((server.address() as net.AddressInfo).port, front);
    } finally {
      server.close();
    }
  };

  test("a connection no proxy server takes is made again: a Service still sending one to a dead replica", async () => {
    await withService(4, async (port, front) => {
      const socket = await dial("echo:1", { ...options, proxy: { ...options.proxy, port } });
      assert.equal(front.connections, 5, "four connections reset, the fifth reached the hub");
      const reading = readAll(socket);
      socket.end("through the live replica");
      assert.equal((await reading).toString(), "through the live replica");
    });
  });

  test("five connections none taken fail the dial; a server that took the connection is never connected again", async () => {
    await withService(Infinity, async (port, front) => {
      await assert.rejects(dial("echo:1", { ...options, proxy: { ...options.proxy, port } }), (err: unknown) => {
        assert.ok(err instanceof ConnectError && err.unreached, String(err));
        assert.match(err.message, /\(5 connections, none taken\)$/);
        return true;
      });
      assert.equal(front.connections, 5);
    });
    // A handshake the server refused (our CA does not sign its certificate): one connection.
    const other = await createTestPki();
    try {
      await withService(0, async (port, front) => {
        await assert.rejects(
          dial("echo:1", { ...options, proxy: { ...options.proxy, port, ca: other.ca } }),
          (err: unknown) => {
            assert.ok(err instanceof ConnectError && !err.unreached, String(err));
            return true;
          },
        );
        assert.equal(front.connections, 1);
      });
    } finally {
      other.cleanup();
    }
  });

  test("a dial given up leaves no connecting past one timeout: a server that resets every connection just before it", async () => {
    const starts: number[] = [];
    const server = net.createServer((socket) => {
      starts.push(Date.now());
      setTimeout(() => socket.resetAndDestroy(), 900);
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const client = new TunnelClient({
      ...options,
      proxy: { ...options.proxy, port: (server.address() as net.AddressInfo).port },
      dialTimeoutMs: 2_000,
    });
    try {
      const abort = new AbortController();
      const dialling = assert.rejects(client.dial("echo:1", { signal: abort.signal }));
      setTimeout(() => abort.abort(), 100);
      await dialling;
      await new Promise((r) => setTimeout(r, 4_000));
      assert.ok(starts.length >= 2, `${starts.length} connections`);
      const spread = starts[starts.length - 1]! - starts[0]!;
      assert.ok(spread < 2_000, `connections went on ${spread} ms after the first (the timeout is 2,000)`);
    } finally {
      await client.close();
      server.close();
    }
  });

  test("close() ends the connecting again at once", async () => {
    await withService(Infinity, async (port, front) => {
      const client = new TunnelClient({ ...options, proxy: { ...options.proxy, port } });
      const dialling = client.dial("echo:1");
      const failed = assert.rejects(dialling);
      while (front.connections === 0) await new Promise((r) => setImmediate(r));
      await client.close();
      await failed;
      assert.equal(front.connections, 1, "no connection after close()");
    });
  });
});

describe("gRPC dial over a Unix socket (plain)", { timeout: 30_000 }, () => {
  test("dial, echo, EOF", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-client-uds-"));
    const fake = await new FakeProxyServer({ udsPath: join(dir, "proxy.sock") }).start();
    try {
      const socket = await dial("echo:1", { proxy: { udsPath: join(dir, "proxy.sock") } });
      const reading = readAll(socket);
      socket.end("over uds");
      assert.equal((await reading).toString(), "over uds");
      await fake.waitForSessionsClosed(1);
    } finally {
      await fake.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("TunnelClient.close() with a session that never reports 'close'", () => {
  /** What node's HTTP/2 session does when its peer stopped reading: destroy() without a "close". */
  function stuckSession(): EventEmitter & { closed: boolean; destroyed: boolean; close(): void; destroy(): void } {
    return Object.assign(new EventEmitter(), {
      closed: false,
      destroyed: false,
      close(this: { closed: boolean }) {
        this.closed = true;
      },
      destroy(this: { destroyed: boolean }) {
        this.destroyed = true;
      },
    });
  }

  test("an idle client resolves once the grace period destroyed the session", async (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const client = new TunnelClient({ proxy: { udsPath: "/nonexistent.sock" } });
    const session = stuckSession();
    Object.assign(client as unknown as { session: unknown }, { session });
    const closing = client.close();
    await new Promise((r) => setImmediate(r));
    assert.equal(session.closed, true, "a graceful close first");
    t.mock.timers.tick(2_000);
    await closing;
    assert.equal(session.destroyed, true);
  });

  test("a client with open tunnels destroys the session and resolves at once", async () => {
    const client = new TunnelClient({ proxy: { udsPath: "/nonexistent.sock" } });
    const session = stuckSession();
    Object.assign(client as unknown as { session: unknown; active: number }, { session, active: 1 });
    await client.close();
    assert.equal(session.destroyed, true);
  });
});
