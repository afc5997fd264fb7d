import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { captureClientHello, waitUntil } from "@cluster-proxy/tunnel/testing";
import {
  HandshakePacer,
  RESUMED_HANDSHAKE_COST,
  SHED_ALERT,
  type DropReason,
  type HandshakePacerOptions,
} from "./handshake-pacer.js";
import { plainHttpOnTlsPortResponse } from "./first-bytes.js";
import { tlsSession } from "../testing/tls-session.js";
import { ticketMadeWith } from "./ticket-keys.js";

let pki: TestPki;
let clientHello: Buffer;
/** A ClientHello that offers a session ticket (a TLS 1.3 resumption). */
let resumingHello: Buffer;

before(async () => {
  pki = await createTestPki();
  clientHello = await captureClientHello();
  resumingHello = await captureClientHello("localhost", (await tlsSession(pki)).session);
});
after(() => pki.cleanup());

interface Rig {
  pacer: HandshakePacer;
  tlsServer: tls.Server;
  port: number;
  drops: DropReason[];
  close(): Promise<void>;
}

async function rig(options: Partial<HandshakePacerOptions>, tlsOptions: tls.TlsOptions = {}): Promise<Rig> {
  const tlsServer = tls.createServer({ cert: pki.serverCert, key: pki.serverKey, ...tlsOptions }, (s) =>
    s.end("hello"),
  );
  tlsServer.on("tlsClientError", () => undefined);
  const drops: DropReason[] = [];
  const pacer = new HandshakePacer(tlsServer, {
    maxConcurrent: 1,
    maxPending: 100,
    onDrop: (_s, reason) => drops.push(reason),
    ...options,
  });
  const sockets = new Set<net.Socket>();
  pacer.server.on("connection", (s: net.Socket) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  pacer.server.listen(0, "127.0.0.1");
  await once(pacer.server, "listening");
  return {
    pacer,
    tlsServer,
    port: (pacer.server.address() as net.AddressInfo).port,
    drops,
    close: async () => {
      pacer.dropWaiting();
      for (const s of sockets) s.destroy();
      pacer.server.close();
      await once(pacer.server, "close");
    },
  };
}

/** Resolves when `s` has closed (an error first is fine). */
function closed(s: net.Socket): Promise<void> {
  return new Promise((resolve) => s.once("close", () => resolve()));
}

/**
 * Connections offer `hellos` (two; default `resumingHello` twice) to a rig of one slot: one
 * handshakes, the other waits, the slot full (its sockets go to `sockets`, for the caller to destroy).
 */
async function oneRunsOneWaits(
  r: Rig,
  sockets: net.Socket[],
  hellos: Buffer[] = [resumingHello, resumingHello],
): Promise<void> {
  for (const hello of hellos) {
    const s = await rawConnection(r.port);
    sockets.push(s);
    s.write(hello);
  }
  await waitUntil("one handshake to run, one to wait", () => {
    const st = r.pacer.state();
    return st.handshaking === 1 && st.waiting === 1;
  });
  assert.equal(r.pacer.state().load, 1);
}

async function rawConnection(port: number): Promise<net.Socket> {
  const s = net.connect(port, "127.0.0.1");
  s.on("error", () => undefined);
  await once(s, "connect");
  return s;
}

/** A TLS client's first read ("hello" from the rig's server, and whether it resumed) or its error. */
function tlsClient(port: number, options: tls.ConnectionOptions = {}): Promise<string> {
  return new Promise((resolve) => {
    const c = tls.connect({ port, host: "127.0.0.1", ca: pki.ca, servername: "localhost", ...options });
    c.once("data", (d: Buffer) => {
      resolve(`${d.toString()}${c.isSessionReused() ? " (resumed)" : ""}`);
      c.destroy();
    });
    c.once("error", (err: NodeJS.ErrnoException) => resolve(`error ${err.code ?? err.message}`));
  });
}

/** Everything `s` receives until the peer closes. */
async function readAll(s: net.Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  s.on("data", (c: Buffer) => chunks.push(c));
  await closed(s);
  return Buffer.concat(chunks);
}

describe("HandshakePacer admission", () => {
  test("a silent connection holds no handshake slot: a client behind it is served at once", async () => {
    const r = await rig({ maxConcurrent: 1 });
    try {
      const silent = await rawConnection(r.port);
      await waitUntil("the silent connection to be accepted", () => r.pacer.state().awaitingHello === 1);
      assert.equal(r.pacer.state().handshaking, 0);
      assert.equal(await tlsClient(r.port), "hello");
      assert.equal(silent.destroyed, false);
      silent.destroy();
    } finally {
      await r.close();
    }
  });

  test("no complete ClientHello within helloTimeoutMs: closed (also when it trickles in)", async () => {
    const timers = new ManualClock();
    const r = await rig({ helloTimeoutMs: 10_000, clock: timers });
    try {
      const silent = await rawConnection(r.port);
      const trickle = await rawConnection(r.port);
      const silentClosed = closed(silent);
      const trickleClosed = closed(trickle);
      await waitUntil("both to be accepted", () => r.pacer.state().awaitingHello === 2);
      trickle.write(clientHello.subarray(0, 3));
      timers.advance(9_999);
      trickle.write(clientHello.subarray(3, 6));
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(r.pacer.state().awaitingHello, 2, "still within the deadline");
      timers.advance(1);
      await Promise.all([silentClosed, trickleClosed]);
      assert.deepEqual(r.drops, ["hello_timeout", "hello_timeout"]);
      assert.equal(r.pacer.state().awaitingHello, 0);
    } finally {
      await r.close();
    }
  });

  test("plain HTTP on the TLS port is answered with a 400 at once; other bytes are closed at once", async () => {
    const r = await rig({ httpAnswer: plainHttpOnTlsPortResponse("--agent-port") });
    try {
      const http = await rawConnection(r.port);
      http.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
      const answer = (await readAll(http)).toString();
      assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
      assert.match(answer, /Client sent an HTTP request to an HTTPS server: this port \(--agent-port\) speaks TLS/);
      const ssh = await rawConnection(r.port);
      ssh.write("\x00\x00SSH-2.0-OpenSSH\r\n");
      assert.equal((await readAll(ssh)).length, 0);
      assert.deepEqual(r.drops, ["http_request", "not_tls"]);
    } finally {
      await r.close();
    }
  });

  test("a ClientHello that then stalls holds its slot; past maxPending a new ClientHello is shed with the alert at once", async () => {
    let shed = 0;
    const r = await rig({ maxConcurrent: 1, maxPending: 0, onShed: () => shed++ });
    try {
      const staller = await rawConnection(r.port);
      staller.write(clientHello);
      await waitUntil("the stalled handshake to take the slot", () => r.pacer.state().handshaking === 1);
      const shedClient = await rawConnection(r.port);
      shedClient.write(clientHello);
      const answer = await readAll(shedClient);
      assert.deepEqual(answer, SHED_ALERT);
      assert.equal(shed, 1);
      staller.destroy();
      await waitUntil("the slot to be free", () => r.pacer.state().handshaking === 0);
      assert.equal(await tlsClient(r.port), "hello");
    } finally {
      await r.close();
    }
  });

  test("one source at its limit cannot hold more; its silent connections make room for its new ones", async () => {
    const r = await rig({ maxPerSource: 2, maxConcurrent: 1 });
    try {
      const staller = await rawConnection(r.port);
      staller.write(clientHello);
      await waitUntil("the stalled handshake to take the slot", () => r.pacer.state().handshaking === 1);
      const silent = await rawConnection(r.port);
      const silentClosed = closed(silent);
      await waitUntil("the silent one to wait", () => r.pacer.state().awaitingHello === 1);
      // The source holds 2: the silent one is closed for the client.
      const client = tlsClient(r.port);
      await silentClosed;
      staller.destroy();
      assert.equal(await client, "hello");
      assert.deepEqual(r.drops, ["source_limit"]);
    } finally {
      await r.close();
    }
  });

  test("a handshake offering a ticket costs RESUMED_HANDSHAKE_COST of a slot, in admission order", async () => {
    const fit = Math.round(1 / RESUMED_HANDSHAKE_COST);
    // The clock stands still: a handshake charged as a resumption that ends without resuming
    // (here: destroyed) owes nothing for the 0 ms it ran (the next test covers what it owes).
    const r = await rig({ maxConcurrent: 1, resumable: () => true, clock: new ManualClock() });
    const sockets: net.Socket[] = [];
    const connect = async (hello: Buffer): Promise<net.Socket> => {
      const s = await rawConnection(r.port);
      sockets.push(s);
      s.write(hello);
      return s;
    };
    try {
      // Stalled resumptions (they never finish their handshake): `fit` of them run at once.
      for (let i = 0; i < fit; i++) await connect(resumingHello);
      await waitUntil(`${fit} resumptions to run at once`, () => r.pacer.state().handshaking === fit);
      assert.equal(r.pacer.state().load, 1);
      // The slot is full: a full handshake waits, and so does a resumption that came after it.
      await connect(clientHello);
      await waitUntil("the full handshake to wait", () => r.pacer.state().waiting === 1);
      await connect(resumingHello);
      await waitUntil("the resumption behind it to wait", () => r.pacer.state().waiting === 2);
      // One resumption ends: the full handshake, first in line, does not fit in its share of the
      // slot, and the resumption behind it does not overtake it although it would fit.
      sockets[0]!.destroy();
      await waitUntil("the resumption to end", () => r.pacer.state().handshaking === fit - 1);
      assert.equal(r.pacer.state().waiting, 2);
      assert.equal(r.pacer.state().load, (fit - 1) * RESUMED_HANDSHAKE_COST);
      // The others end too: the full handshake starts, the slot full again.
      for (const s of sockets.slice(1, fit)) s.destroy();
      await waitUntil("the full handshake to start", () => r.pacer.state().waiting === 1);
      assert.equal(r.pacer.state().handshaking, 1);
      assert.equal(r.pacer.state().load, 1);
    } finally {
      for (const s of sockets) s.destroy();
      await r.close();
    }
  });

  test("a ticket of the port's key that ends in a full handshake owes the rest of a full slot for as long again", async () => {
    // The port's ticket key: the rig's server issues and resumes its tickets, the pacer prices them.
    const key = randomBytes(48);
    const clock = new ManualClock();
    const r = await rig(
      { maxConcurrent: 1, resumable: (ticket) => ticketMadeWith(ticket, key), clock },
      { ticketKeys: key },
    );
    // Each handshake runs 40 ms on the pacer's clock (until the end of the test, which stands still).
    let handshakeMs = 40;
    r.tlsServer.on("connection", () => clock.advance(handshakeMs));
    const sockets: net.Socket[] = [];
    try {
      const { session } = await tlsSession(pki, { ticketKeys: key });
      assert.equal(await tlsClient(r.port, { session }), "hello (resumed)");
      assert.equal(r.pacer.state().load, 0, "a resumption owes nothing");
      // The same real ticket, with only a cipher suite of another hash than the session's
      // (TLS_AES_256_GCM_SHA384): the pacer cannot tell from the ClientHello; OpenSSL runs a full handshake.
      assert.equal(await tlsClient(r.port, { session, ciphers: "TLS_AES_128_GCM_SHA256" }), "hello");
      assert.equal(r.pacer.state().handshaking, 0);
      assert.equal(r.pacer.state().load, 1 - RESUMED_HANDSHAKE_COST, "it owes the rest of a full slot");
      clock.advance(39);
      assert.equal(r.pacer.state().load, 1 - RESUMED_HANDSHAKE_COST, "for as long again as it ran");
      clock.advance(1);
      assert.equal(r.pacer.state().load, 0);

      // What it owes is held against maxConcurrent: with a stalled resumption it fills the slot.
      assert.equal(await tlsClient(r.port, { session, ciphers: "TLS_AES_128_GCM_SHA256" }), "hello");
      handshakeMs = 0;
      await oneRunsOneWaits(r, sockets, [await captureClientHello("localhost", session), clientHello]);
      clock.advance(40);
      assert.equal(r.pacer.state().load, RESUMED_HANDSHAKE_COST, "the debt paid");
      assert.equal(r.pacer.state().waiting, 1, "a full handshake does not fit beside the resumption");
      // The resumption is dropped after 40 ms: it owes for 40 ms more, and then the full one starts.
      sockets[0]!.destroy();
      await waitUntil("the resumption to end", () => r.pacer.state().handshaking === 0);
      assert.equal(r.pacer.state().load, 1 - RESUMED_HANDSHAKE_COST);
      assert.equal(r.pacer.state().waiting, 1);
      clock.advance(40);
      await waitUntil("the full handshake to start", () => r.pacer.state().waiting === 0);
      assert.equal(r.pacer.state().load, 1);
    } finally {
      for (const s of sockets) s.destroy();
      await r.close();
    }
  });

  test("a ticket no key of the port can resume costs a full slot (a bogus ticket is no discount)", async () => {
    // The rig's server never issued resumingHello's ticket: its handshake is a full one.
    const offered: Buffer[] = [];
    const r = await rig({
      maxConcurrent: 1,
      resumable: (ticket) => {
        offered.push(ticket);
        return false;
      },
    });
    const sockets: net.Socket[] = [];
    try {
      await oneRunsOneWaits(r, sockets);
      assert.ok(offered.length >= 1, "the pacer asked whether the ticket resumes");
    } finally {
      for (const s of sockets) s.destroy();
      await r.close();
    }
  });

  test("without a resumable test (a port without ticket keys) every ticket costs a full slot", async () => {
    const r = await rig({ maxConcurrent: 1 });
    const sockets: net.Socket[] = [];
    try {
      await oneRunsOneWaits(r, sockets);
    } finally {
      for (const s of sockets) s.destroy();
      await r.close();
    }
  });

  test("a flood of real tickets that end in full handshakes runs no more of them over time than full price allows", async () => {
    const key = randomBytes(48);
    const { session } = await tlsSession(pki, { ticketKeys: key });
    // A ticket the issuing server gave a lifetime of 1 s, offered (replayed) after it: OpenSSL's
    // clock, not the pacer's, tells the age, so this test waits that long once.
    const shortLived = await tlsSession(pki, { ticketKeys: key, sessionTimeout: 1 });
    const expired = await captureClientHello("localhost", shortLived.session);
    const issued = Date.now();
    // The port's real ticket, offered so that OpenSSL cannot resume it: with only a cipher suite of
    // another hash than the session's, without a PSK mode, past its lifetime.
    const hellos = {
      otherHash: await captureClientHello("localhost", session, { ciphers: "TLS_AES_128_GCM_SHA256" }),
      noPskMode: withoutExtension(await captureClientHello("localhost", session), PSK_KEY_EXCHANGE_MODES),
      expired,
    };
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, issued + 2_100 - Date.now())));
    const floods: [string, Buffer | Buffer[]][] = [
      ...Object.entries(hellos),
      // Each beside a full handshake: the full one must not start on the half slot the other took.
      ["otherHash and fresh in turn", [hellos.otherHash, clientHello]],
      ["fresh and otherHash in turn", [clientHello, hellos.otherHash, hellos.otherHash]],
    ];
    for (const maxConcurrent of [1, 2]) {
      for (const [name, hello] of floods) {
        // The same flood priced as full handshakes...
        const full = await flood(maxConcurrent, key, hello, () => false);
        // ...and priced by the port's keys.
        const priced = await flood(maxConcurrent, key, hello, (ticket) => ticketMadeWith(ticket, key));
        const what = `${name}, ${maxConcurrent} at once: ${priced.started} started vs ${full.started} at full price`;
        assert.equal(priced.resumable, true, `${what}: the pacer took the ticket for a resumption`);
        assert.equal(priced.resumed, 0, `${what}: none resumed`);
        // Over time no more than at full price, but for the first round (twice as many at once).
        assert.ok(priced.started <= full.started + maxConcurrent, what);
        assert.ok(priced.peak <= maxConcurrent / RESUMED_HANDSHAKE_COST, `${what}: at once ${priced.peak}`);
      }
    }
  });

  test("a ClientHello that does not fit beside the handshakes running waits within maxPending, else is shed", async () => {
    const r = await rig({ maxConcurrent: 1, maxPending: 0, resumable: () => true, clock: new ManualClock() });
    const sockets: net.Socket[] = [];
    try {
      const resuming = await rawConnection(r.port);
      sockets.push(resuming);
      resuming.write(resumingHello);
      await waitUntil("the resumption to run", () => r.pacer.state().handshaking === 1);
      assert.equal(r.pacer.state().load, RESUMED_HANDSHAKE_COST);
      // Half the slot is free, but a full handshake needs all of it: it would wait, and none may.
      for (let i = 0; i < 3; i++) {
        const full = await rawConnection(r.port);
        sockets.push(full);
        full.write(clientHello);
        assert.deepEqual(await readAll(full), SHED_ALERT);
      }
      assert.equal(r.pacer.state().waiting, 0);
      assert.equal(r.pacer.state().shed, 3);
    } finally {
      for (const s of sockets) s.destroy();
      await r.close();
    }
  });

  test("a ticket of the port's key whose handshake fails on the server's side owes the rest of a full slot", async () => {
    const key = randomBytes(48);
    const clock = new ManualClock();
    const r = await rig(
      { maxConcurrent: 1, resumable: (ticket) => ticketMadeWith(ticket, key), clock },
      { ticketKeys: key },
    );
    const { session } = await tlsSession(pki, { ticketKeys: key });
    const hello = await captureClientHello("localhost", session, { ciphers: "TLS_AES_128_GCM_SHA256" });
    try {
      const s = await rawConnection(r.port);
      s.write(hello);
      await once(s, "data");
      assert.equal(r.pacer.state().load, RESUMED_HANDSHAKE_COST);
      clock.advance(50);
      // Not a TLS record: the TLS server fails the handshake.
      s.write(Buffer.alloc(64, 0xff));
      await closed(s);
      await waitUntil("the failed handshake to end", () => r.pacer.state().handshaking === 0);
      assert.equal(r.pacer.state().load, 1 - RESUMED_HANDSHAKE_COST);
      clock.advance(50);
      assert.equal(r.pacer.state().load, 0);
    } finally {
      await r.close();
    }
  });
});

/** The psk_key_exchange_modes extension's type. */
const PSK_KEY_EXCHANGE_MODES = 45;

/** `hello` (one ClientHello record) without its extension of `type`, its lengths fixed. */
function withoutExtension(hello: Buffer, type: number): Buffer {
  let at = 9 + 2 + 32;
  at += 1 + hello.readUInt8(at);
  at += 2 + hello.readUInt16BE(at);
  at += 1 + hello.readUInt8(at);
  const extensionsAt = at;
  const kept: Buffer[] = [];
  for (at += 2; at < hello.length;) {
    const length = 4 + hello.readUInt16BE(at + 2);
    if (hello.readUInt16BE(at) !== type) kept.push(hello.subarray(at, at + length));
    at += length;
  }
  const extensions = Buffer.concat(kept);
  const out = Buffer.concat([hello.subarray(0, extensionsAt + 2), extensions]);
  out.writeUInt16BE(extensions.length, extensionsAt);
  out.writeUInt16BE(out.length - 5, 3);
  out.writeUIntBE(out.length - 9, 6, 3);
  assert.ok(out.length < hello.length, "the extension was there");
  return out;
}

/**
 * A flood of connections offering `hello` (or in turn each of a list) to a port of `maxConcurrent` handshakes whose server
 * holds ticket key `key`, the pacer pricing tickets with `resumable`: each handshake runs 100 ms on
 * the pacer's clock after the server's first flight, then its client drops it (as one dodging what
 * it owes would), for 10 steps of 100 ms. How many handshakes started, most at once, and whether
 * the pacer took the ticket for a resumption, and how many resumed.
 */
async function flood(
  maxConcurrent: number,
  key: Buffer,
  hello: Buffer | Buffer[],
  resumable: (ticket: Buffer) => boolean,
): Promise<{ started: number; peak: number; resumable: boolean; resumed: number }> {
  const ms = 100;
  const clock = new ManualClock();
  let priced = false;
  const r = await rig(
    {
      maxConcurrent,
      clock,
      resumable: (ticket) => {
        const yes = resumable(ticket);
        priced ||= yes;
        return yes;
      },
    },
    { ticketKeys: key },
  );
  const began: { raw: net.Socket; at: number; ended: boolean }[] = [];
  r.tlsServer.on("connection", (raw: net.Socket) => {
    const b = { raw, at: clock.now(), ended: false };
    began.push(b);
    raw.once("close", () => (b.ended = true));
  });
  const clients: net.Socket[] = [];
  let flights = 0;
  let resumed = 0;
  r.tlsServer.on("secureConnection", (s: tls.TLSSocket) => (resumed += s.isSessionReused() ? 1 : 0));
  const running = (): number => began.filter((b) => !b.ended).length;
  const settled = (): Promise<void> =>
    waitUntil("every started handshake to have answered, every ended one to be let go", () => {
      return flights === began.length && r.pacer.state().handshaking === running();
    });
  try {
    for (let i = 0; i < 16 * maxConcurrent + 8; i++) {
      const s = await rawConnection(r.port);
      clients.push(s);
      s.once("data", () => flights++);
      s.write(Array.isArray(hello) ? hello[i % hello.length]! : hello);
    }
    let peak = 0;
    for (let step = 0; step < 10; step++) {
      await settled();
      peak = Math.max(peak, running());
      clock.advance(ms);
      for (const b of began) {
        if (b.ended || clock.now() - b.at < ms) continue;
        b.ended = true;
        b.raw.destroy();
      }
      await settled();
    }
    return { started: began.length, peak, resumable: priced, resumed };
  } finally {
    for (const s of clients) s.destroy();
    await r.close();
  }
}
