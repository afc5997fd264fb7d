import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError } from "@cluster-proxy/errors";
import { dialConnect } from "./connect-dial.js";
import { loadProxyTls, proxyTlsError, tlsOptionsOf, describeProxy } from "./options.js";
import { TunnelClient } from "./tunnel-client.js";
import { createTestPki } from "@cluster-proxy/pki/testing";
import { TlsFileError } from "@cluster-proxy/tunnel";

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
    assert.throws(
      () => loadProxyTls({ caFile: join(pki.dir, "missing.crt") }),
      (err: Error) => err instanceof TlsFileError && /^caFile: .*missing\.crt: cannot read: ENOENT/.test(err.message),
    );
    assert.throws(
      () => loadProxyTls({ caFile: join(pki.dir, "missing.crt") }, { caFile: "--proxy-ca" }),
      (err: Error) => err instanceof TlsFileError && err.flag === "--proxy-ca",
    );
    assert.throws(
      () => loadProxyTls({ certFile: pki.paths.client.cert, keyFile: pki.paths.server.key }),
      (err: Error) =>
        err instanceof TlsFileError && /^keyFile: .*: does not match the certificate in certFile /.test(err.message),
    );
  } finally {
    pki.cleanup();
  }
});

test("tlsOptionsOf and describeProxy", () => {
  assert.deepEqual(tlsOptionsOf({ port: 1, ca: "x", servername: "hub" }), { ca: "x", servername: "hub" });
  assert.equal(describeProxy({ host: "::1", port: 8090 }), "[::1]:8090");
  assert.equal(describeProxy({ udsPath: "/run/p.sock" }), "unix:/run/p.sock");
});

test("a CA that holds no certificate is refused naming the option, not blamed on the server", async () => {
  // Issue 25: README.md given as the CA was accepted; every connection then failed as if the
  // server's certificate were wrong.
  const pki = await createTestPki();
  try {
    const notPem = join(pki.dir, "README.md");
    writeFileSync(notPem, "# cluster-proxy\n\nNot a certificate.\n");
    assert.throws(
      () => loadProxyTls({ caFile: notPem }),
      (err: Error) =>
        err instanceof TlsFileError &&
        err.code === "CP_ERR_TLS_FILE" &&
        /^caFile: .*README\.md: holds no PEM certificate/.test(err.message),
    );
    assert.throws(
      () => loadProxyTls({ keyFile: notPem }),
      /^TlsFileError: keyFile: .*README\.md: not a PEM private key/,
    );
    const readme = readFileSync(notPem);
    assert.throws(
      () => new TunnelClient({ proxy: { host: "127.0.0.1", port: 1, ca: readme } }),
      (err: Error) =>
        err instanceof ConfigError && /^TunnelClient: proxy\.ca holds no PEM certificate/.test(err.message),
    );
    assert.throws(
      () => new TunnelClient({ proxy: { host: "127.0.0.1", port: 1, ca: pki.ca, cert: pki.clientCert, key: readme } }),
      /proxy\.key not a PEM private key/,
    );
    await assert.rejects(
      dialConnect("east:443", { proxy: { host: "127.0.0.1", port: 1, ca: readme } }),
      (err: Error) =>
        err instanceof ConfigError && /^dialConnect: proxy\.ca holds no PEM certificate/.test(err.message),
    );
    // Good material passes.
    new TunnelClient({ proxy: { host: "127.0.0.1", port: 1, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } });
  } finally {
    pki.cleanup();
  }
});

test("a buffer checked once and then overwritten in place is checked again", async () => {
  const pki = await createTestPki();
  try {
    const ca = Buffer.from(pki.ca);
    const key = Buffer.from(pki.clientKey);
    const proxy = { ca, cert: pki.clientCert, key };
    assert.equal(proxyTlsError(proxy, "TunnelClient"), undefined);
    // The same buffers, their bytes replaced (e.g. a pool reused for the next file read).
    ca.fill("#");
    assert.match(proxyTlsError(proxy, "TunnelClient")?.message ?? "", /proxy\.ca holds no PEM certificate/);
    pki.ca.copy(ca);
    key.fill("#");
    assert.match(proxyTlsError(proxy, "TunnelClient")?.message ?? "", /proxy\.key not a PEM private key/);
    pki.clientKey.copy(key);
    assert.equal(proxyTlsError(proxy, "TunnelClient"), undefined, "good again");
  } finally {
    pki.cleanup();
  }
});
