import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadProxyTls, tlsOptionsOf, describeProxy } from "./options.js";
import { createTestPki } from "@cluster-proxy/pki/testing";

test("loadProxyTls reads the files and names the one it cannot read", async () => {
  const pki = await createTestPki();
  try {
    const tls = loadProxyTls({
      caFile: pki.paths.ca.cert,
      certFile: pki.paths.client.cert,
      keyFile: pki.paths.client.key,
    });
    assert.ok(tls.ca?.equals(pki.ca));
    assert.ok(tls.cert?.equals(pki.clientCert));
    assert.ok(tls.key?.equals(pki.clientKey));
    assert.deepEqual(loadProxyTls({}), {});
    assert.throws(() => loadProxyTls({ caFile: join(pki.dir, "missing.crt") }), /CA file .*missing\.crt/);
  } finally {
    pki.cleanup();
  }
});

test("tlsOptionsOf and describeProxy", () => {
  assert.deepEqual(tlsOptionsOf({ port: 1, ca: "x", servername: "hub" }), { ca: "x", servername: "hub" });
  assert.equal(describeProxy({ host: "::1", port: 8090 }), "[::1]:8090");
  assert.equal(describeProxy({ udsPath: "/run/p.sock" }), "unix:/run/p.sock");
});
