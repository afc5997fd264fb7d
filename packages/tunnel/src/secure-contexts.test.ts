import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate, constants } from "node:crypto";
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

/** A TLS server asking for client certificates that answers each client with its certificate's subject. */
function subjectEchoServer(): tls.Server {
  return tls.createServer(
    { cert: pki.serverCert, key: pki.serverKey, ca: [pki.clientCa, pki.agentCa], requestCert: true },
    (s) => s.end(`${s.getPeerX509Certificate()?.subject ?? "none"}`),
  );
}

/** Listen on a loopback port; resolves with it. */
async function listening(server: tls.Server): Promise<number> {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return (server.address() as net.AddressInfo).port;
}

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
    const server = subjectEchoServer();
    const port = await listening(server);
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

  test("every option tls.createSecureContext reads is in the key: no two of these share a context", () => {
    const cache = new SecureContextCache(64);
    const base: tls.ConnectionOptions = { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
    const variants: tls.ConnectionOptions[] = [
      base,
      { ...base, allowPartialTrustChain: true },
      // Read by node, not (yet) declared by its types.
      Object.assign({}, base, { certificateCompression: ["zlib"] }),
      { ...base, passphrase: "p" },
      { ...base, ciphers: "TLS_AES_128_GCM_SHA256" },
      { ...base, sigalgs: "ecdsa_secp256r1_sha256" },
      { ...base, ecdhCurve: "P-256" },
      { ...base, secureOptions: constants.SSL_OP_NO_TICKET },
      { ...base, minVersion: "TLSv1.3" },
      { ...base, maxVersion: "TLSv1.2" },
      { ...base, honorCipherOrder: true },
      { ...base, ca: [pki.ca, pki.clientCa] },
      { ...base, ca: [pki.clientCa, pki.ca] },
    ];
    const contexts = variants.map((o) => cache.withContext(o).secureContext);
    assert.equal(new Set(contexts).size, variants.length);
    // The same options again: the same contexts.
    assert.deepEqual(
      variants.map((o) => cache.withContext({ ...o }).secureContext),
      contexts,
    );
  });

  test("a context is never presented for another identity: after eviction, and after the certificate is replaced", async () => {
    const server = subjectEchoServer();
    const port = await listening(server);
    // One context at most, as the agent's.
    const cache = new SecureContextCache(1);
    const presented = (options: tls.ConnectionOptions): Promise<string> =>
      new Promise((resolve, reject) => {
        const c = tls.connect(
          cache.withContext({ host: "127.0.0.1", port, ca: pki.ca, servername: "localhost", ...options }),
        );
        let peer = "";
        c.on("data", (d: Buffer) => (peer += d.toString()));
        c.on("end", () => resolve(peer));
        c.on("error", reject);
      });
    const subjectA = new X509Certificate(pki.clientCert).subject;
    const subjectB = new X509Certificate(pki.agentCert).subject;
    assert.notEqual(subjectA, subjectB);
    try {
      for (let round = 0; round < 3; round++) {
        assert.equal(await presented({ cert: pki.clientCert, key: pki.clientKey }), subjectA);
        assert.equal(await presented({ cert: pki.agentCert, key: pki.agentKey }), subjectB);
      }
      // A reload that rewrites the same buffers in place (padded to one length with newlines).
      const pad = (pem: Buffer, length: number): Buffer =>
        Buffer.concat([pem, Buffer.alloc(length - pem.length, "\n")]);
      const certLength = Math.max(pki.clientCert.length, pki.agentCert.length);
      const keyLength = Math.max(pki.clientKey.length, pki.agentKey.length);
      const cert = pad(pki.clientCert, certLength);
      const key = pad(pki.clientKey, keyLength);
      const reloaded = { cert, key };
      assert.equal(await presented(reloaded), subjectA);
      pad(pki.agentCert, certLength).copy(cert);
      pad(pki.agentKey, keyLength).copy(key);
      assert.equal(await presented(reloaded), subjectB, "the replaced certificate is not presented");
      // A reload that replaces the buffers: the same.
      reloaded.cert = pad(pki.clientCert, certLength);
      reloaded.key = pad(pki.clientKey, keyLength);
      assert.equal(await presented(reloaded), subjectA);
      assert.equal(cache.size, 1);
    } finally {
      server.close();
    }
  });

  test("rejectUnauthorized is the connection's: a context shared with a lenient connection still refuses an untrusted server", async () => {
    const server = tls.createServer({ cert: pki.serverCert, key: pki.serverKey }, (s) => s.end("hello"));
    const port = await listening(server);
    const cache = new SecureContextCache();
    // A CA that did not sign the server's certificate.
    const untrusting = { host: "127.0.0.1", port, ca: pki.clientCa, servername: "localhost" };
    const read = (options: tls.ConnectionOptions): Promise<string> =>
      new Promise((resolve) => {
        const c = tls.connect(options);
        let got = "";
        c.on("data", (d: Buffer) => (got += d.toString()));
        c.on("end", () => resolve(got));
        c.on("error", (err: NodeJS.ErrnoException) => resolve(`error ${err.code ?? err.message}`));
      });
    try {
      const lenient = cache.withContext({ ...untrusting, rejectUnauthorized: false });
      assert.equal(await read(lenient), "hello");
      const strict = cache.withContext(untrusting);
      assert.equal(strict.secureContext, lenient.secureContext, "one context");
      assert.equal(strict.rejectUnauthorized, undefined);
      assert.match(await read(strict), /^error /);
    } finally {
      server.close();
    }
  });
});
