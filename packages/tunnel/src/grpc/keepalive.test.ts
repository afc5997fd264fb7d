/**
 * keepSessionAlive under overload (issue 18): a peer that stopped answering is found dead within
 * the timeout, but a process that was itself too busy to read the answer does not kill a healthy
 * session.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { EventEmitter, once } from "node:events";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { AddressInfo } from "node:net";
import { rawH2 } from "../testing/index.js";
import { keepSessionAlive, probeIdleSession } from "./session.js";

/** Busy-wait: this process does nothing else for `ms`. */
function stall(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    /* spin */
  }
}

test("a stalled process does not mistake its own slowness for a dead peer", async () => {
  const server = http2.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  await once(session, "connect");
  const dead: string[] = [];
  try {
    // Stall right after the first ping went out, for more than twice the timeout: its answer (from
    // the server in this same process) can only be read once the stall is over.
    const ping = session.ping.bind(session);
    let stalled = false;
    session.ping = ((...args: Parameters<typeof session.ping>) => {
      const sent = ping(...args);
      if (!stalled) {
        stalled = true;
        stall(800);
      }
      return sent;
    }) as typeof session.ping;
    keepSessionAlive(session, 100, 300, (reason) => dead.push(reason));
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.ok(stalled, "the stall happened");
    assert.deepEqual(dead, [], "the session survived its own process's stall");
    assert.equal(session.destroyed, false);
  } finally {
    session.destroy();
    server.close();
  }
});

test("a peer that stopped answering is found dead within about the timeout", async () => {
  const peer = spawn(
    process.execPath,
    [
      "-e",
      'const s = require("node:http2").createServer(); s.listen(0, "127.0.0.1", () => console.log(s.address().port));',
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  try {
    const [line] = (await once(peer.stdout, "data")) as [Buffer];
    const session = http2.connect(`http://127.0.0.1:${Number(line.toString().trim())}`);
    session.on("error", () => undefined);
    await once(session, "connect");
    peer.kill("SIGSTOP"); // alive for the kernel, silent for us
    const started = Date.now();
    const dead = new Promise<string>((resolve) => keepSessionAlive(session, 100, 300, resolve));
    const timeout = new Promise<string>((resolve) => setTimeout(() => resolve("not noticed"), 10_000).unref());
    const reason = await Promise.race([dead, timeout]);
    assert.match(reason, /no keepalive answer within 300 ms/);
    assert.ok(Date.now() - started < 3_000, `noticed after ${Date.now() - started} ms`);
    session.destroy();
  } finally {
    peer.kill("SIGCONT");
    peer.kill("SIGKILL");
  }
});

/** An HTTP/2 server whose sessions are probed when idle for 200 ms (answer deadline 300 ms). */
async function probedServer(maxIdleMs = 200): Promise<{
  server: http2.Http2Server;
  port: number;
  dead: string[];
  deaths: EventEmitter<{ dead: [string] }>;
}> {
  const server = http2.createServer();
  const dead: string[] = [];
  const deaths = new EventEmitter<{ dead: [string] }>();
  server.on("session", (session) => {
    session.on("error", () => undefined);
    probeIdleSession(
      session,
      200,
      300,
      (reason) => {
        dead.push(reason);
        deaths.emit("dead", reason);
      },
      maxIdleMs,
    );
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { server, port: (server.address() as AddressInfo).port, dead, deaths };
}

test("a session nghttp2 ended with GOAWAY is closed once it idles, though the client keeps its end open", async () => {
  // Issue 25: after a protocol error nghttp2 sends GOAWAY and stops reading and writing; node 20
  // emits nothing and kept the socket open for as long as the client did, so the idle probe is
  // what closes it there. Node 24 and later close such a session themselves (the probe then
  // finds nothing to do): either way the socket must close.
  const { server, port, dead } = await probedServer();
  const attacks = [
    rawH2.oversizedFrameHeader(),
    Buffer.concat(
      Array.from({ length: 1500 }, (_, i) => [rawH2.openStream(1 + 2 * i, "/x"), rawH2.resetStream(1 + 2 * i)]).flat(),
    ),
  ];
  try {
    for (const attack of attacks) {
      const socket = net.connect(port, "127.0.0.1");
      socket.on("error", () => undefined);
      socket.resume();
      await once(socket, "connect");
      socket.write(Buffer.concat([rawH2.clientStart(), attack]));
      const closed = once(socket, "close");
      const timeout = new Promise<string>((resolve) => setTimeout(() => resolve("still open"), 10_000).unref());
      assert.notEqual(await Promise.race([closed.then(() => "closed"), timeout]), "still open");
      socket.destroy();
    }
    // Closed by node itself, or by the probe (one death each).
    assert.ok(dead.length === 0 || dead.length === attacks.length, `probe deaths: ${dead.length}`);
  } finally {
    server.close();
  }
});

test("a session closed gracefully (GOAWAY: a drain) keeps its open streams: neither probe takes the cancelled ping for a dead peer", async () => {
  // Node cancels every ping of a session that sent or received GOAWAY; the keepalive and the idle
  // probe used to destroy it then, cutting the streams a drain lets finish.
  const server = http2.createServer();
  const serverSessions: http2.ServerHttp2Session[] = [];
  server.on("session", (s) => serverSessions.push(s));
  server.on("stream", (stream) => stream.respond({ ":status": 200 }));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  const dead: string[] = [];
  try {
    const stream = client.request({ ":path": "/" }, { endStream: false });
    await once(stream, "response");
    const serverSession = serverSessions[0]!;
    keepSessionAlive(serverSession, 50, 200, (reason) => dead.push(`server keepalive: ${reason}`));
    probeIdleSession(serverSession, 50, 200, (reason) => dead.push(`server probe: ${reason}`));
    keepSessionAlive(client, 50, 200, (reason) => dead.push(`client keepalive: ${reason}`));
    probeIdleSession(client, 50, 200, (reason) => dead.push(`client probe: ${reason}`));
    const goaway = once(client, "goaway");
    serverSession.close();
    await goaway;
    await new Promise((resolve) => setTimeout(resolve, 600));
    assert.deepEqual(dead, []);
    assert.equal(serverSession.destroyed, false);
    assert.equal(client.destroyed, false);
    assert.equal(stream.destroyed, false, "the stream open before the GOAWAY is still open");
  } finally {
    client.destroy();
    server.close();
  }
});

test("an idle healthy session answers every probe, quiet period after quiet period, and stays open", async () => {
  const { server, port, dead } = await probedServer();
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    await once(session, "connect");
    let pings = 0;
    const third = new Promise<void>((resolve) =>
      session.on("ping", () => {
        if (++pings === 3) resolve();
      }),
    );
    const timeout = new Promise<void>((resolve) => setTimeout(resolve, 10_000).unref());
    await Promise.race([third, timeout]);
    assert.ok(pings >= 3, `probed ${pings} time(s) in 10 s of quiet periods of 200 ms`);
    assert.deepEqual(dead, []);
    assert.equal(session.destroyed, false);
  } finally {
    session.destroy();
    server.close();
  }
});

test("the quiet period doubles after every answer, up to its maximum", async () => {
  const { server, port, dead } = await probedServer(800);
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    await once(session, "connect");
    const at: number[] = [];
    const fifth = new Promise<void>((resolve) =>
      session.on("ping", () => {
        if (at.push(performance.now()) === 5) resolve();
      }),
    );
    const timeout = new Promise<void>((resolve) => setTimeout(resolve, 20_000).unref());
    await Promise.race([fifth, timeout]);
    assert.equal(at.length, 5, `probed ${at.length} time(s) in 20 s`);
    // A probe goes out a quiet period after the last answer arrived, so a gap is never shorter
    // than its period (200 -> 400 -> 800 -> 800); a busy machine only makes it longer.
    const gaps = at.slice(1).map((t, i) => Math.round(t - at[i]!));
    [400, 800, 800, 800].forEach((period, i) =>
      assert.ok(gaps[i]! >= period - 25, `gap ${i + 1} of ${JSON.stringify(gaps)}: under ${period} ms`),
    );
    assert.deepEqual(dead, []);
  } finally {
    session.destroy();
    server.close();
  }
});

test("a peer that answered earlier probes and then went silent is found dead", async () => {
  const { server, port, dead, deaths } = await probedServer();
  // The peer is another process, so that SIGSTOP silences it while its socket stays open.
  const peer = spawn(
    process.execPath,
    [
      "-e",
      `const s = require("node:http2").connect("http://127.0.0.1:${port}"); s.on("ping", () => console.log("ping"));`,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  try {
    let answered = 0;
    const twice = new Promise<void>((resolve) =>
      peer.stdout.on("data", (chunk: Buffer) => {
        answered += chunk.toString().split("ping").length - 1;
        if (answered >= 2) resolve();
      }),
    );
    const timeout = new Promise<void>((resolve) => setTimeout(resolve, 10_000).unref());
    await Promise.race([twice, timeout]);
    assert.ok(answered >= 2, `the peer answered ${answered} probe(s)`);
    peer.kill("SIGSTOP");
    const found = once(deaths, "dead");
    const deadline = new Promise<void>((resolve) => setTimeout(resolve, 10_000).unref());
    await Promise.race([found, deadline]);
    assert.equal(dead.length, 1, "the silent peer's session was probed and found dead");
    assert.match(dead[0] ?? "", /300 ms/);
  } finally {
    peer.kill("SIGCONT");
    peer.kill("SIGKILL");
    server.close();
  }
});
