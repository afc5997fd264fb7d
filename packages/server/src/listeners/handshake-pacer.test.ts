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
      // One resumption ends: its share of the slot goes to the full handshake, first in line
      // (the resumption behind it does not overtake it although it would fit).
      sockets[0]!.destroy();
      await waitUntil("the full handshake to start", () => r.pacer.state().waiting === 1);
      assert.equal(r.pacer.state().handshaking, fit);
      assert.equal(r.pacer.state().load, (fit - 1) * RESUMED_HANDSHAKE_COST + 1);
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
      await waitUntil("the debt paid, the full handshake to start", () => r.pacer.state().handshaking === 2);
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
});
