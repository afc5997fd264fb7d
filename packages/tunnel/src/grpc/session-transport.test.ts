import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import * as net from "node:net";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TUNNEL_HTTP2_OPTIONS, connectSession, widenSessionWindow } from "./session.js";
import { SessionTransport } from "./session-transport.js";

const MiB = 1024 * 1024;

/** Write `size` bytes in 1 MiB writes, keeping up to 16 MiB queued (as the relay does), then end. */
async function pump(stream: http2.Http2Stream, size: number): Promise<void> {
  const chunk = Buffer.alloc(MiB, 7);
  for (let sent = 0; sent < size; sent += chunk.length) {
    stream.write(chunk);
    if (stream.writableLength > 16 * MiB) await once(stream, "drain");
  }
  stream.end();
}

/** Read everything; resolves with the byte count at the end of the stream. */
function readAll(stream: http2.Http2Stream): Promise<number> {
  let n = 0;
  stream.on("data", (c: Buffer) => (n += c.length));
  return new Promise((resolve, reject) => {
    stream.once("end", () => resolve(n));
    stream.once("error", reject);
  });
}

/** A tunnel-tuned HTTP/2 server on a Unix socket; `onStream` handles every request. */
async function withUdsServer(
  onStream: (stream: http2.ServerHttp2Stream) => void,
  body: (udsPath: string) => Promise<void>,
): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "cp-transport-"));
  const udsPath = join(dir, "h2.sock");
  const server = http2.createServer(TUNNEL_HTTP2_OPTIONS);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    widenSessionWindow(s);
    sessions.add(s);
  });
  server.on("stream", onStream);
  server.listen(udsPath);
  await once(server, "listening");
  try {
    await body(udsPath);
  } finally {
    for (const s of sessions) s.destroy();
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
}

test("both ends of a session send 64 MiB at once: no deadlock (node:http2 on both ends alone hangs)", async () => {
  // Both peers are node:http2 with 16 MiB windows: each write is many MiB, more than the socket
  // buffers hold. A node session does not read while its write is in progress, so without the
  // SessionTransport under the client each side waits for the other for ever.
  const size = 64 * MiB;
  let serverGot: Promise<number> | undefined;
  await withUdsServer(
    (stream) => {
      stream.respond({ ":status": 200 });
      serverGot = readAll(stream);
      void pump(stream, size);
    },
    async (udsPath) => {
      const session = await connectSession({ udsPath });
      try {
        const req = session.request({ ":method": "POST", ":path": "/" });
        const clientGot = readAll(req);
        void pump(req, size);
        let timer: NodeJS.Timeout | undefined;
        const deadline = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("deadlock: no progress within 20 s")), 20_000);
        });
        try {
          assert.equal(await Promise.race([clientGot, deadline]), size, "client read everything");
          assert.ok(serverGot);
          assert.equal(await Promise.race([serverGot, deadline]), size, "server read everything");
        } finally {
          clearTimeout(timer);
        }
      } finally {
        session.destroy();
      }
    },
  );
});

test("session.unref() lets the process exit: it reaches the socket under the JS stream", async () => {
  await withUdsServer(
    (stream) => stream.respond({ ":status": 200 }),
    async (udsPath) => {
      const session = await connectSession({ udsPath });
      const pipes = (): number => process.getActiveResourcesInfo().filter((r) => r === "PipeWrap").length;
      try {
        session.ref();
        const referenced = pipes();
        session.unref();
        assert.equal(pipes(), referenced - 1, "unref() released the client's socket");
        session.ref();
        assert.equal(pipes(), referenced, "ref() holds it again");
      } finally {
        session.destroy();
      }
    },
  );
});

/** A socket connected to a loopback peer that reads nothing until the test resumes it. */
async function connectedToSilentPeer(): Promise<{ server: net.Server; socket: net.Socket; peer: net.Socket }> {
  const server = net.createServer({ pauseOnConnect: true });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const accepted = once(server, "connection") as Promise<[net.Socket]>;
  const socket = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
  await once(socket, "connect");
  const [peer] = await accepted;
  return { server, socket, peer };
}

test("SessionTransport: writes complete while the peer does not read, up to the hold limit, then wait for drain", async () => {
  const { server, socket, peer } = await connectedToSilentPeer();
  const transport = new SessionTransport(socket, 8 * MiB);
  try {
    const completed: number[] = [];
    const chunk = Buffer.alloc(MiB, 1);
    // The peer reads nothing and the kernel takes a few MiB at most: the writes up to the limit
    // complete at once (queued in the socket), the rest wait.
    for (let i = 0; i < 16; i++) transport.write(chunk, () => completed.push(i));
    // Polling with a deadline for the writes up to the limit; the rest must still wait after.
    for (let i = 0; i < 100 && completed.length < 8; i++) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setImmediate(r));
    assert.ok(completed.length >= 8, `writes up to the limit completed (${completed.length})`);
    assert.ok(completed.length < 16, "a write past the limit waits");
    // The peer reads: the socket drains and the held write completes.
    peer.resume();
    for (let i = 0; i < 100 && completed.length < 16; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(completed.length, 16, "all writes completed once the peer read");
  } finally {
    transport.destroy();
    peer.destroy();
    server.close();
  }
});

test("SessionTransport: end() finishes once the socket flushed, so the destroy node does next loses nothing", async () => {
  const { server, socket, peer } = await connectedToSilentPeer();
  const transport = new SessionTransport(socket);
  try {
    const size = 16 * MiB;
    transport.write(Buffer.alloc(size, 3));
    let finished = false;
    transport.end(() => (finished = true));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(finished, false, "not finished while the peer has not read what we queued");
    // node's session destroys its socket as soon as the transport finished (finishSessionClose).
    let got = 0;
    const peerDone = new Promise<void>((resolve) => peer.once("close", () => resolve()));
    peer.on("data", (c: Buffer) => (got += c.length));
    peer.on("error", () => undefined);
    peer.resume();
    await once(transport, "finish");
    transport.destroy();
    await peerDone;
    assert.equal(got, size, "the peer got every byte");
  } finally {
    transport.destroy();
    peer.destroy();
    server.close();
  }
});

test("SessionTransport: the peer's end closes it once everything before was read, and never ends it", async () => {
  const { server, socket, peer } = await connectedToSilentPeer();
  const transport = new SessionTransport(socket);
  try {
    // Less than the read-ahead: the socket reads it all and the end while nothing reads the
    // transport, then closes.
    const size = 256 * 1024;
    let ended = false;
    transport.on("end", () => (ended = true));
    const closed = once(transport, "close");
    peer.end(Buffer.alloc(size, 5));
    peer.resume();
    await once(socket, "close");
    let got = 0;
    transport.on("data", (c: Buffer) => (got += c.length));
    await closed;
    assert.equal(got, size, "every byte the peer sent before its end was read");
    assert.equal(ended, false, "no end reached the reader (node's stream socket would shut its writes down)");
  } finally {
    transport.destroy();
    peer.destroy();
    server.close();
  }
});

test("a client session whose server hangs up survives the destroy of its streams and itself at any moment after", async () => {
  // node asserts (ERR_INTERNAL_ASSERTION, an uncaught exception that ended the process) when the
  // session writes after its JS stream socket began shutting down, which an end from the transport
  // started: a destroyed stream's RST_STREAM or the session's GOAWAY. Each moment is tried: inside
  // that shutdown (if one starts), at the socket's end, and one turn later; before the fix the
  // first one failed every time.
  const moments = ["shutdown", "end", "immediate"] as const;
  for (const moment of moments) {
    const server = net.createServer((s) => {
      s.on("error", () => undefined);
      s.resume();
      // An empty SETTINGS frame and the ack of the client's, then the FIN once the test asks.
      s.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0]));
      server.emit("peer", s);
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const peerReady = once(server, "peer") as Promise<[net.Socket]>;
    const socket = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
    const transport = new SessionTransport(socket);
    const session = http2.connect("http://localhost", { createConnection: () => transport });
    session.on("error", () => undefined);
    try {
      await once(session, "connect");
      const [peer] = await peerReady;
      const streams = [0, 1, 2].map(() => {
        const s = session.request({ ":method": "POST", ":path": "/" });
        s.on("error", () => undefined);
        s.write("x");
        return s;
      });
      const destroyAll = (): void => {
        for (const s of streams) s.destroy();
        session.destroy();
      };
      // node's stream socket shuts its write side down with end(callback) on the transport.
      const end = transport.end.bind(transport) as (...args: unknown[]) => SessionTransport;
      Object.assign(transport, {
        end: (...args: unknown[]): SessionTransport => {
          if (moment === "shutdown" && typeof args.at(-1) === "function") destroyAll();
          return end(...args);
        },
      });
      socket.once("end", () => {
        if (moment === "end") destroyAll();
        else if (moment === "immediate") setImmediate(destroyAll);
      });
      const closed = once(session, "close");
      peer.end();
      await closed;
      assert.ok(session.destroyed, `${moment}: the session is destroyed`);
      assert.ok(transport.destroyed, `${moment}: the transport is destroyed`);
    } finally {
      session.destroy();
      socket.destroy();
      server.close();
    }
  }
});
