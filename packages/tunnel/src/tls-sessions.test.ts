import { test } from "node:test";
import assert from "node:assert/strict";
import * as tls from "node:tls";
import { tlsSessionKey } from "./tls-sessions.js";

const pem = (name: string): Buffer => Buffer.from(`-----BEGIN ${name}-----\n`);
const where = "proxy.example:8090";

test("two identities never share a session key: certificate, key, pfx, CA, CRL or server name", () => {
  const base: tls.ConnectionOptions = { cert: pem("A"), key: pem("KA"), ca: pem("CA") };
  const keys = [
    base,
    { ...base, cert: pem("B") },
    { ...base, key: pem("KB") },
    { ...base, ca: pem("CB") },
    { ...base, servername: "other" },
    { ...base, crl: pem("CRL") },
    // An identity given as a PKCS#12 bundle (no cert or key option), as a buffer or as objects.
    { ca: pem("CA"), pfx: pem("P1") },
    { ca: pem("CA"), pfx: pem("P2") },
    { ca: pem("CA"), pfx: [{ buf: pem("P3"), passphrase: "x" }] },
    { ca: pem("CA"), pfx: [{ buf: pem("P4"), passphrase: "x" }] },
    // Keys as objects (a PEM with its passphrase).
    { cert: pem("A"), key: [{ pem: pem("KC"), passphrase: "x" }], ca: pem("CA") },
    { cert: pem("A"), key: [{ pem: pem("KD"), passphrase: "x" }], ca: pem("CA") },
  ].map((o) => tlsSessionKey(where, o));
  assert.equal(new Set(keys).size, keys.length, keys.join("\n"));
});

test("a PEM that moves from one option to the next changes the key (each option is delimited)", () => {
  const [a, b, k] = [pem("A"), pem("B"), pem("K")];
  assert.notEqual(tlsSessionKey(where, { cert: [a, b], key: k }), tlsSessionKey(where, { cert: a, key: [b, k] }));
  assert.notEqual(tlsSessionKey(where, { cert: a, key: [k] }), tlsSessionKey(where, { cert: [a, k] }));
});

test("connections given their own secure contexts share a session only with the same context", () => {
  const one = tls.createSecureContext({});
  const two = tls.createSecureContext({});
  assert.notEqual(tlsSessionKey(where, { secureContext: one }), tlsSessionKey(where, { secureContext: two }));
  assert.equal(tlsSessionKey(where, { secureContext: one }), tlsSessionKey(where, { secureContext: one }));
  assert.notEqual(tlsSessionKey(where, { secureContext: one }), tlsSessionKey(where, {}));
});

test("the same options give the same key; another server another one", () => {
  const o = { cert: pem("A"), key: pem("K"), ca: [pem("C1"), pem("C2")], servername: "s" };
  assert.equal(tlsSessionKey(where, o), tlsSessionKey(where, { ...o, cert: Buffer.from(pem("A")) }));
  assert.notEqual(tlsSessionKey(where, o), tlsSessionKey("other:8090", o));
});
