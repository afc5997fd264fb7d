/**
 * The reload of --tls-session-ticket-key-file on an injected clock (polled every interval of that
 * clock, a changed file installed once), the pacer's test of a ticket (made with a door's key: its
 * name and HMAC), and door keys bound to the door's CA file.
 */
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { describe, test } from "node:test";
import * as tls from "node:tls";
import { createTestPki } from "@cluster-proxy/pki/testing";
import { captureClientHello } from "@cluster-proxy/tunnel/testing";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { clientHelloTicket } from "./first-bytes.js";
import { ServerTicketKeys } from "./ticket-doors.js";
import { tlsSession } from "../testing/tls-session.js";
import { TICKET_KEY_BYTES, formatTicketKeyFile } from "./ticket-keys.js";

/** A ticket in node's format made with `key`: key name, IV, "encrypted" state, HMAC over them. */
function ticketOf(key: Buffer): Buffer {
  const body = Buffer.concat([key.subarray(0, 16), randomBytes(16), randomBytes(96)]);
  return Buffer.concat([body, createHmac("sha256", key.subarray(16, 32)).update(body).digest()]);
}

/** Let a poll's read and check run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

/** Keys of the file whose content `content()` gives at each read, never polled. */
function keysOf(content: () => Buffer): Promise<ServerTicketKeys> {
  return ServerTicketKeys.load({
    file: "/keys",
    lifetimeMs: 60_000,
    intervalMs: 0,
    logger: silentLogger,
    readFile: () => Promise.resolve(content()),
  });
}

describe("ServerTicketKeys reload", () => {
  test("the key file is polled every interval of the injected clock; a new key is installed once", async () => {
    const clock = new ManualClock();
    const first = randomBytes(TICKET_KEY_BYTES);
    const second = randomBytes(TICKET_KEY_BYTES);
    let content = Buffer.from(formatTicketKeyFile([first]));
    let reads = 0;
    const reloads: string[] = [];
    const keys = await ServerTicketKeys.load({
      file: "/keys",
      lifetimeMs: 60_000,
      intervalMs: 1_000,
      logger: silentLogger,
      onReload: (r) => reloads.push(r),
      readFile: () => {
        reads++;
        return Promise.resolve(content);
      },
      timers: clock,
    });
    const before = keys.key("door", "primary");
    keys.start();
    assert.equal(reads, 1, "read once on load");
    content = Buffer.from(formatTicketKeyFile([second, first]));
    clock.advance(999);
    await settle();
    assert.equal(reads, 1, "no poll before the interval");
    clock.advance(1);
    await settle();
    assert.equal(reads, 2);
    assert.deepEqual(reloads, ["success"]);
    assert.notDeepEqual(keys.key("door", "primary"), before, "the new key is in use");
    clock.advance(1_000);
    await settle();
    assert.equal(reads, 3, "and again an interval later");
    assert.deepEqual(reloads, ["success"], "unchanged content is not reloaded again");
    keys.stop();
    assert.equal(clock.armed, 0, "stopped: no poll left");
  });

  test("resumable: only a ticket named by the door's key (or, with one, the previous key) resumes", async () => {
    const first = randomBytes(TICKET_KEY_BYTES);
    const second = randomBytes(TICKET_KEY_BYTES);
    let content = Buffer.from(formatTicketKeyFile([first]));
    const keys = await keysOf(() => content);
    const server = tls.createServer();
    keys.register("door", server, tls.createServer());
    const resumable = keys.resumable("door");
    const firstKey = keys.key("door", "primary");
    assert.equal(resumable(ticketOf(firstKey)), true, "a ticket of the door's key");
    assert.equal(resumable(randomBytes(80)), false, "a bogus ticket");
    const forged = Buffer.concat([firstKey.subarray(0, 16), randomBytes(96)]);
    assert.equal(resumable(forged), false, "a made-up ticket that copies the key's name");
    assert.equal(resumable(randomBytes(8)), false, "a ticket too short to name a key");
    assert.equal(keys.resumable("other")(ticketOf(firstKey)), false, "a door without keys");
    content = Buffer.from(formatTicketKeyFile([second, first]));
    assert.equal(await keys.check(), "reloaded");
    assert.equal(resumable(ticketOf(keys.key("door", "primary"))), true, "the new key");
    assert.equal(resumable(ticketOf(firstKey)), true, "the previous key (the twin resumes it)");
    content = Buffer.from(formatTicketKeyFile([second]));
    assert.equal(await keys.check(), "reloaded");
    assert.equal(resumable(ticketOf(firstKey)), false, "a key dropped from the file");
  });

  test("a ticket is judged again after every change of the keys, and per door (the verdicts are kept per ticket)", async () => {
    const first = randomBytes(TICKET_KEY_BYTES);
    let content = Buffer.from(formatTicketKeyFile([first]));
    const keys = await keysOf(() => content);
    const [primary, twin] = [tls.createServer(), tls.createServer()];
    keys.register("door", primary, twin);
    keys.register("other", tls.createServer(), tls.createServer());
    // One ticket object asked every time, as the pacer asks for its cost and then its server.
    const ticket = ticketOf(keys.key("door", "primary"));
    const [resumable, route] = [keys.resumable("door"), keys.route("door")];
    assert.equal(resumable(ticket), true);
    assert.equal(route(ticket), undefined, "the door's own server");
    assert.equal(keys.resumable("other")(ticket), false, "another door's keys: its own verdict");
    content = Buffer.from(formatTicketKeyFile([randomBytes(TICKET_KEY_BYTES), first]));
    assert.equal(await keys.check(), "reloaded");
    assert.equal(route(ticket), twin, "a previous key now: the twin");
    assert.equal(resumable(ticket), true);
    keys.trust(["door"], Buffer.from("another CA"));
    assert.equal(resumable(ticket), false, "the CA file changed: the door's keys did too");
    assert.equal(route(ticket), undefined);
  });

  test("a door's keys follow its CA file: the same file, the same keys (replicas); another file, other keys", async () => {
    const fileKey = Buffer.from(formatTicketKeyFile([randomBytes(TICKET_KEY_BYTES)]));
    const load = (): Promise<ServerTicketKeys> =>
      ServerTicketKeys.load({
        file: "/keys",
        lifetimeMs: 60_000,
        intervalMs: 0,
        logger: silentLogger,
        readFile: () => Promise.resolve(fileKey),
      });
    const [a, b] = [await load(), await load()];
    const [caOne, caTwo] = [Buffer.from("CA one"), Buffer.from("CA two")];
    a.trust(["door"], caOne);
    b.trust(["door"], caOne);
    a.register("door", tls.createServer(), tls.createServer());
    const before = a.key("door", "primary");
    assert.deepEqual(b.key("door", "primary"), before, "replicas trusting the same CAs share the door's key");
    const ticket = ticketOf(before);
    assert.equal(a.resumable("door")(ticket), true);
    a.trust(["door"], caTwo);
    assert.notDeepEqual(a.key("door", "primary"), before, "another CA file, another key");
    assert.equal(a.resumable("door")(ticket), false, "a ticket of the old trust is a full handshake");
    assert.notDeepEqual(a.key("other", "primary"), a.key("door", "primary"), "doors keep keys of their own");
    a.trust(["door"], caOne);
    assert.deepEqual(a.key("door", "primary"), before, "derived, not random: the old CA file, the old key");
  });

  test("a real ticket of the door's key passes; the same ticket altered in one byte does not", async () => {
    const pki = await createTestPki();
    try {
      const keys = await ServerTicketKeys.load({ file: "", lifetimeMs: 60_000, intervalMs: 0, logger: silentLogger });
      keys.register("door", tls.createServer(), tls.createServer());
      const { session } = await tlsSession(pki, keys.tlsOptions("door", "primary"));
      // The ticket as the pacer reads it: the first PSK identity of the resuming ClientHello.
      const ticket = clientHelloTicket(await captureClientHello("localhost", session));
      assert.ok(ticket, "the ClientHello offers the ticket");
      assert.equal(keys.resumable("door")(ticket), true);
      const altered = Buffer.from(ticket);
      altered[40] = (altered[40] ?? 0) ^ 1;
      assert.equal(keys.resumable("door")(altered), false);
    } finally {
      pki.cleanup();
    }
  });
});
