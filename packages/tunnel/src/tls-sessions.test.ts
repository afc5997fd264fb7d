import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as tls from "node:tls";
import { once } from "node:events";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { SecureContextCache } from "./secure-contexts.js";
import { TlsSessionCache, connectResuming, tlsSessionKey } from "./tls-sessions.js";

const where = "proxy.example:8090";

let pki: TestPki;
before(async () => {
  pki = await createTestPki();
});
after(() => pki.cleanup());

test("two identities never share a session key: certificate and key, CA, partial-chain trust or server name", () => {
  const contexts = new SecureContextCache();
  const base: tls.ConnectionOptions = { cert: pki.clientCert, key: pki.clientKey, ca: pki.ca };
  const keys = [
    base,
    { ...base, cert: pki.agentCert, key: pki.agentKey },
    { ...base, ca: pki.clientCa },
    { ...base, ca: [pki.ca, pki.clientCa] },
    { ...base, servername: "other" },
    { ...base, allowPartialTrustChain: true },
  ].map((o) => tlsSessionKey(where, contexts.withContext(o)));
  assert.ok(keys.every((k) => k !== undefined));
  assert.equal(new Set(keys).size, keys.length, keys.join("\n"));
});

test("the same identity gives the same key through one cache; another server another one", () => {
  const contexts = new SecureContextCache();
  const o = { cert: pki.clientCert, key: pki.clientKey, ca: pki.ca, servername: "s" };
  const key = tlsSessionKey(where, contexts.withContext(o));
  assert.equal(tlsSessionKey(where, contexts.withContext({ ...o, cert: Buffer.from(pki.clientCert) })), key);
  assert.notEqual(tlsSessionKey("other:8090", contexts.withContext(o)), key);
});

test("a context rebuilt after eviction, or made by another cache, gets keys of its own", () => {
  const contexts = new SecureContextCache(1);
  const a = { cert: pki.clientCert, key: pki.clientKey, ca: pki.ca };
  const first = tlsSessionKey(where, contexts.withContext(a));
  contexts.withContext({ ...a, ca: pki.clientCa });
  assert.notEqual(tlsSessionKey(where, contexts.withContext(a)), first);
  assert.notEqual(tlsSessionKey(where, new SecureContextCache().withContext(a)), first);
});

test("connections given their own secure contexts share a session only with the same context", () => {
  const one = tls.createSecureContext({});
  const two = tls.createSecureContext({});
  assert.notEqual(tlsSessionKey(where, { secureContext: one }), tlsSessionKey(where, { secureContext: two }));
  assert.equal(tlsSessionKey(where, { secureContext: one }), tlsSessionKey(where, { secureContext: one }));
});

test("options without a context (not shareable, e.g. a pfx list with passphrases) keep no session", () => {
  const contexts = new SecureContextCache();
  const pfxList = { pfx: [{ buf: Buffer.from("not read"), passphrase: "x" }] };
  assert.equal(tlsSessionKey(where, contexts.withContext(pfxList)), undefined);
  assert.equal(tlsSessionKey(where, { cert: pki.clientCert, key: pki.clientKey }), undefined);
});

test("a session verified by a lenient server check is not offered by a connection with a stricter one", async (t) => {
  // Node skips checkServerIdentity on a resumed session: resuming one that a connection obtained
  // with another check (or that skipped the check) would pass a server this connection refuses.
  const server = tls.createServer({ cert: pki.serverCert, key: pki.serverKey }, (s) => s.end("hi"));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(() => server.close());
  const port = (server.address() as { port: number }).port;
  const contexts = new SecureContextCache();
  const connect = async (sessions: TlsSessionCache, o: tls.ConnectionOptions): Promise<boolean> => {
    const options = contexts.withContext({
      host: "127.0.0.1",
      port,
      ca: pki.ca,
      servername: "not-the-server.example",
      ...o,
    });
    const { socket } = connectResuming(sessions, `127.0.0.1:${port}`, options);
    const ticket = new Promise<void>((done) => {
      socket
        .once("session", () => done())
        .once("close", () => done())
        .resume();
    });
    try {
      await once(socket, "secureConnect");
      await ticket;
      return true;
    } catch {
      return false;
    } finally {
      socket.destroy();
    }
  };
  const refuseAll = (): Error => new Error("not the pinned server");
  const lenients: [string, tls.ConnectionOptions][] = [
    ["a check that accepts any name", { checkServerIdentity: () => undefined }],
    ["rejectUnauthorized: false", { rejectUnauthorized: false }],
  ];
  for (const [name, lenient] of lenients) {
    const sessions = new TlsSessionCache();
    assert.equal(await connect(sessions, lenient), true);
    assert.equal(sessions.size, 1, "the lenient connection kept a ticket");
    assert.equal(await connect(sessions, { checkServerIdentity: refuseAll }), false, `a refusing check after ${name}`);
    assert.equal(await connect(sessions, {}), false, `the default check after ${name}`);
  }
});
