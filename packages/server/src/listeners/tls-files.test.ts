// Unit tests of @cluster-proxy/tunnel's reader of the TLS files flags name (kept here: this
// package has @cluster-proxy/pki to issue test certificates).
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "@cluster-proxy/pki";
import { loadTlsFiles, loadTlsFilesSync, pemProblem, TlsFileError, type TlsFiles } from "@cluster-proxy/tunnel";

describe("loadTlsFiles / loadTlsFilesSync", () => {
  let dir: string;
  let ca: CertificateAndKey;
  let one: CertificateAndKey;
  let two: CertificateAndKey;
  const file = (name: string): string => join(dir, name);
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "tls-files-"));
    ca = await createCertificateAuthority({ commonName: "ca", validityDays: 2 });
    one = await issueCertificate(ca, { commonName: "one", dnsNames: ["localhost"], usage: "server", validityDays: 1 });
    two = await issueCertificate(ca, { commonName: "two", dnsNames: ["localhost"], usage: "server", validityDays: 1 });
    await writeFile(file("tls.crt"), one.certPem);
    await writeFile(file("tls.key"), one.keyPem);
    await writeFile(file("ca.crt"), ca.certPem);
    await writeFile(file("other.key"), two.keyPem);
    await writeFile(file("text"), "hello\n");
    await writeFile(file("bad-block.crt"), "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
    await writeFile(file("bad.key"), "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const set = (cert = "tls.crt", key = "tls.key", caFile = "ca.crt"): TlsFiles => ({
    cert: { flag: "--x-cert", path: file(cert) },
    key: { flag: "--x-key", path: file(key) },
    ca: { flag: "--x-ca-cert", path: file(caFile) },
  });

  test("a good set is read whole, sync and async alike; absent entries stay absent", async () => {
    const material = await loadTlsFiles(set());
    assert.equal(material.cert?.toString(), one.certPem);
    assert.equal(material.key?.toString(), one.keyPem);
    assert.equal(material.ca?.toString(), ca.certPem);
    assert.deepEqual(loadTlsFilesSync(set()), material);
    const caOnly = await loadTlsFiles({ ca: { flag: "--ca-cert", path: file("ca.crt") } });
    assert.deepEqual(Object.keys(caOnly), ["ca"]);
  });

  // What is wrong, the files (built once the directory exists), the flag to blame and why.
  const failures: [string, () => TlsFiles, string, RegExp][] = [
    ["missing", () => ({ ca: { flag: "--ca-cert", path: file("none.crt") } }), "--ca-cert", /cannot read: ENOENT/],
    ["unreadable (a directory)", () => ({ ca: { flag: "--ca-cert", path: dir } }), "--ca-cert", /cannot read: EISDIR/],
    ["a CA that is not PEM", () => ({ ca: { flag: "--ca-cert", path: file("text") } }), "--ca-cert", /holds no PEM/],
    ["a certificate block that does not parse", () => set("bad-block.crt"), "--x-cert", /certificate 1 of 1 does not/],
    ["a key that is not a PEM key", () => set("tls.crt", "bad.key"), "--x-key", /not a PEM private key/],
    ["a key not matching the certificate", () => set("tls.crt", "other.key"), "--x-key", /does not match .* --x-cert/],
  ];
  for (const [what, filesOf, flag, why] of failures) {
    test(`${what}: a TlsFileError (CP_ERR_TLS_FILE) naming ${flag} and the file`, async () => {
      const files = filesOf();
      const path = (flag === "--x-cert" ? files.cert : flag === "--x-key" ? files.key : files.ca)?.path ?? "";
      const check = (err: unknown): boolean => {
        assert.ok(err instanceof TlsFileError, String(err));
        assert.equal(err.code, "CP_ERR_TLS_FILE");
        assert.equal(err.flag, flag);
        assert.equal(err.path, path);
        assert.ok(err.message.startsWith(`${flag}: ${path}: `), err.message);
        assert.match(err.message, why);
        return true;
      };
      await assert.rejects(loadTlsFiles(files), check);
      assert.throws(() => loadTlsFilesSync(files), check);
    });
  }

  test("pemProblem: the reader's reasons for material given as buffers", () => {
    assert.equal(pemProblem(one.certPem, "certificate"), undefined);
    assert.equal(pemProblem(Buffer.from(one.keyPem), "key"), undefined);
    assert.match(pemProblem("hello", "certificate") ?? "", /^holds no PEM certificate/);
    assert.match(pemProblem(one.certPem, "key") ?? "", /^not a PEM private key/);
  });
});
