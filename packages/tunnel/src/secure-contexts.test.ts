import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { once } from "node:events";
import type * as net from "node:net";
import * as tls from "node:tls";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { SecureContextCache } from "./secure-contexts.js";

let pki: TestPki;
before(async () => {
  pki = await createTestPki();
});
after(() => pki.cleanup());

describe("SecureContextCache", () => {
  test("the connections of one identity share a context; another certificate, key or CA gets its own", () => {
    const cache = new SecureContextCache();
    const client = { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
    const first = cache.withContext({ ...client, servername: "a", ALPNProtocols: ["h2"] }).secureContext;
    assert.ok(first);
    // Per-connection options (name, ALPN, address, session) are not the context's.
    const again = cache.withContext({
      ...client,
      servername: "b",
      host: "127.0.0.1",
      port: 1,
      session: Buffer.alloc(8),
    });
    assert.equal(again.secureContext, first);
    assert.equal(again.servername, "b", "the connection's own options are kept");
    for (const other of [
      { ...client, cert: pki.agentCert, key: pki.agentKey },
      { ...client, ca: pki.clientCa },
      { ...client, ca: [pki.ca, pki.clientCa] },
      { ...client, minVersion: "TLSv1.3" as const },
    ]) {
      assert.notEqual(cache.withContext(other).secureContext, first);
    }
    assert.equal(cache.size, 5);
  });

  test("two identities through one cache: the server sees each one's own certificate, and sessions resume", async () => {
    const server = tls.createServer(
      { cert: pki.serverCert, key: pki.serverKey, ca: [pki.clientCa, pki.agentCa], requestCert: true },
      (s) => s.end(`${s.getPeerX509Certificate()?.subject ?? "none"}`),
    );
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const port = (server.address() as net.AddressInfo).port;
    const cache = new SecureContextCache();
    const connect = (
      cert: Buffer,
      key: Buffer,
      session?: Buffer,
    ): Promise<{ peer: string; resumed: boolean; session?: Buffer }> =>
      new Promise((resolve, reject) => {
        const c = tls.connect(
          cache.withContext({
            host: "127.0.0.1",
            port,
            ca: pki.ca,
            cert,
            key,
            servername: "localhost",
            ...(session ? { session } : {}),
          }),
        );
        let got: Buffer | undefined;
        let peer = "";
        c.on("session", (s: Buffer) => (got = s));
        c.on("data", (d: Buffer) => (peer += d.toString()));
        c.on("end", () => resolve({ peer, resumed: c.isSessionReused(), ...(got ? { session: got } : {}) }));
        c.on("error", reject);
      });
    try {
      const a = await connect(pki.clientCert, pki.clientKey);
      const b = await connect(pki.agentCert, pki.agentKey);
      assert.notEqual(a.peer, b.peer);
      assert.equal(a.peer, new X509Certificate(pki.clientCert).subject);
      assert.equal(b.peer, new X509Certificate(pki.agentCert).subject);
      const resumed = await connect(pki.clientCert, pki.clientKey, a.session);
      assert.equal(resumed.resumed, true);
      assert.equal(resumed.peer, a.peer);
      assert.equal(cache.size, 2);
    } finally {
      server.close();
    }
  });

  test("bad material throws what tls.createSecureContext throws, and nothing is kept", () => {
    const cache = new SecureContextCache();
    const bad = { cert: pki.clientCert, key: Buffer.from("not a key") };
    let expected: unknown;
    try {
      tls.createSecureContext(bad);
    } catch (err) {
      expected = err;
    }
    assert.ok(expected instanceof Error);
    assert.throws(() => cache.withContext(bad), { message: expected.message });
    assert.equal(cache.size, 0);
  });

  test("at most its bound: the least recently used context goes first", () => {
    const cache = new SecureContextCache(2);
    const a = { ca: pki.ca };
    const b = { ca: pki.clientCa };
    const c = { ca: pki.agentCa };
    const ctxA = cache.withContext(a).secureContext;
    const ctxB = cache.withContext(b).secureContext;
    assert.equal(cache.withContext(a).secureContext, ctxA, "a used again: b is now the oldest");
    cache.withContext(c);
    assert.equal(cache.size, 2);
    assert.equal(cache.withContext(a).secureContext, ctxA, "a kept");
    assert.notEqual(cache.withContext(b).secureContext, ctxB, "b was dropped: made anew");
  });

  test("options it cannot key, or that name a context, are passed on as they are", () => {
    const cache = new SecureContextCache();
    const own = tls.createSecureContext({ ca: pki.ca });
    const named = { ca: pki.ca, secureContext: own };
    assert.equal(cache.withContext(named), named);
    const objects = { pfx: [{ buf: Buffer.from("x"), passphrase: "p" }] };
    assert.equal(cache.withContext(objects), objects);
    assert.equal(cache.size, 0);
  });
});
