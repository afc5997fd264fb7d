import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as tls from "node:tls";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { SecureContextCache } from "./secure-contexts.js";
import { tlsSessionKey } from "./tls-sessions.js";

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
