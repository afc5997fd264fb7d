// Unit tests of @cluster-proxy/tunnel's CertReloader (kept here: this package already has
// @cluster-proxy/pki to issue test certificates).
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { before, describe, test } from "node:test";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "@cluster-proxy/pki";
import {
  CertReloader,
  TlsFileError,
  earliestExpiry,
  checkTlsMaterial,
  tlsDigest,
  type TlsMaterial,
} from "@cluster-proxy/tunnel";
import { ManualClock, recordingLogger } from "@cluster-proxy/kit/testing";

const FILES = {
  cert: { flag: "--server-cert", path: "/certs/tls.crt" },
  key: { flag: "--server-key", path: "/certs/tls.key" },
  ca: { flag: "--server-ca-cert", path: "/certs/ca.crt" },
};

describe("CertReloader", () => {
  let ca: CertificateAndKey;
  let one: CertificateAndKey;
  let two: CertificateAndKey;
  before(async () => {
    ca = await createCertificateAuthority({ commonName: "ca", validityDays: 2 });
    one = await issueCertificate(ca, { commonName: "one", dnsNames: ["localhost"], usage: "server", validityDays: 1 });
    two = await issueCertificate(ca, { commonName: "two", dnsNames: ["localhost"], usage: "server", validityDays: 2 });
  });

  const disk = (pem: CertificateAndKey, caPem = ca.certPem): Map<string, Buffer> =>
    new Map([
      [FILES.cert.path, Buffer.from(pem.certPem)],
      [FILES.key.path, Buffer.from(pem.keyPem)],
      [FILES.ca.path, Buffer.from(caPem)],
    ]);
  const materialOf = (files: Map<string, Buffer>): TlsMaterial => ({
    cert: files.get(FILES.cert.path),
    key: files.get(FILES.key.path),
    ca: files.get(FILES.ca.path),
  });

  function setup(files: Map<string, Buffer>) {
    const logger = recordingLogger();
    const timers = new ManualClock();
    const applied: TlsMaterial[] = [];
    const results: string[] = [];
    const reloader = new CertReloader({
      what: "test listener",
      files: FILES,
      intervalMs: 10_000,
      initial: materialOf(files),
      apply: (m) => void applied.push(m),
      onResult: (r) => void results.push(r),
      logger,
      timers,
      readFile: (path) => {
        const data = files.get(path);
        return data ? Promise.resolve(data) : Promise.reject(new Error("ENOENT: no such file"));
      },
    });
    return { reloader, logger, timers, applied, results };
  }

  test("unchanged files: nothing is applied or logged", async () => {
    const files = disk(one);
    const { reloader, logger, applied } = setup(files);
    assert.equal(await reloader.check(), "unchanged");
    assert.deepEqual(applied, []);
    assert.deepEqual(logger.lines, []);
  });

  test("a changed certificate and key are applied once, with one info line naming the serial", async () => {
    const files = disk(one);
    const { reloader, logger, applied, results } = setup(files);
    for (const [k, v] of disk(two)) files.set(k, v);
    assert.equal(await reloader.check(), "reloaded");
    assert.equal(await reloader.check(), "unchanged");
    assert.equal(applied.length, 1);
    assert.equal(applied[0]!.cert!.toString(), two.certPem);
    assert.deepEqual(results, ["success"]);
    const info = logger.lines.filter((l) => l.level === "info");
    assert.equal(info.length, 1);
    assert.match(info[0]!.msg ?? "", /reloaded TLS certificates of the test listener/);
    assert.match(String(info[0]!.obj["serial"]), /^[0-9A-F]+$/);
  });

  test("a key not matching the certificate is refused naming the flag and file, once; a later good pair is taken", async () => {
    const files = disk(one);
    const { reloader, logger, applied, results } = setup(files);
    files.set(FILES.cert.path, Buffer.from(two.certPem)); // the key is still one's: mid-rotation or a mistake
    assert.equal(await reloader.check(), "failed");
    assert.equal(await reloader.check(), "failed");
    assert.deepEqual(applied, []);
    const errors = logger.lines.filter((l) => l.level === "error");
    assert.equal(errors.length, 1, "the same bad content is reported once");
    assert.equal(errors[0]!.obj["flag"], "--server-key");
    assert.equal(errors[0]!.obj["file"], FILES.key.path);
    assert.match(String(errors[0]!.obj["err"]), /does not match the certificate in --server-cert \/certs\/tls\.crt/);
    assert.match(errors[0]!.msg ?? "", /keeping the ones in use/);
    files.set(FILES.key.path, Buffer.from(two.keyPem));
    assert.equal(await reloader.check(), "reloaded");
    assert.deepEqual(results, ["failure", "success"]);
  });

  test("unparsable files and unreadable files are refused naming the flag", async () => {
    const files = disk(one);
    const { reloader, logger } = setup(files);
    files.set(
      FILES.ca.path,
      Buffer.from("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"),
    );
    assert.equal(await reloader.check(), "failed");
    files.set(FILES.ca.path, Buffer.from("hello"));
    assert.equal(await reloader.check(), "failed");
    files.delete(FILES.cert.path);
    assert.equal(await reloader.check(), "failed");
    files.set(FILES.cert.path, Buffer.from(one.certPem));
    files.set(FILES.key.path, Buffer.from("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"));
    files.set(FILES.ca.path, Buffer.from(ca.certPem));
    assert.equal(await reloader.check(), "failed");
    const errors = logger.lines
      .filter((l) => l.level === "error")
      .map((l) => `${String(l.obj["flag"])} ${String(l.obj["err"])}`);
    assert.equal(errors.length, 4);
    assert.match(errors[0]!, /^--server-ca-cert .*certificate 1 of 1 does not parse/);
    assert.match(errors[1]!, /^--server-ca-cert .*holds no PEM certificate/);
    assert.match(errors[2]!, /^--server-cert .*cannot read: ENOENT/);
    assert.match(errors[3]!, /^--server-key .*not a PEM private key/);
    // back to the loaded content: unchanged, and a later identical bad content is reported again
    files.set(FILES.key.path, Buffer.from(one.keyPem));
    assert.equal(await reloader.check(), "unchanged");
  });

  test("a swap of the files between two reads (old and new mixed) is not applied; the whole new set is, once", async () => {
    const files = disk(one);
    const next = disk(two);
    const applied: TlsMaterial[] = [];
    let reads = 0;
    const reloader = new CertReloader({
      what: "x",
      files: FILES,
      intervalMs: 0,
      initial: materialOf(files),
      apply: (m) => void applied.push(m),
      logger: recordingLogger(),
      // The volume swaps to the new set right after the first file of this check was read.
      readFile: (path) => {
        if (++reads === 2) for (const [k, v] of next) files.set(k, v);
        return Promise.resolve(files.get(path)!);
      },
    });
    assert.equal(await reloader.check(), "unchanged", "a mixed read is not taken");
    assert.equal(await reloader.check(), "reloaded");
    assert.equal(await reloader.check(), "unchanged");
    assert.equal(applied.length, 1);
    assert.deepEqual(applied[0], materialOf(next));
  });

  test("an apply that throws counts as a failure and is retried with the next change", async () => {
    const files = disk(one);
    const logger = recordingLogger();
    let fail = true;
    const reloader = new CertReloader({
      what: "x",
      files: FILES,
      intervalMs: 0,
      initial: materialOf(files),
      apply: () => {
        if (fail) throw new Error("setSecureContext said no");
      },
      logger,
      readFile: (path) => Promise.resolve(files.get(path)!),
    });
    for (const [k, v] of disk(two)) files.set(k, v);
    assert.equal(await reloader.check(), "failed");
    assert.match(String(logger.lines[0]!.obj["err"]), /setSecureContext said no/);
    fail = false;
    files.set(FILES.ca.path, Buffer.from(ca.certPem + two.certPem));
    assert.equal(await reloader.check(), "reloaded");
  });

  test("polls on the injected timer every interval; 0 disables; stop clears it", async () => {
    const files = disk(one);
    const { reloader, timers, applied } = setup(files);
    reloader.start();
    reloader.start();
    assert.equal(timers.armed, 1);
    for (const [k, v] of disk(two)) files.set(k, v);
    timers.advance(9_999);
    assert.equal(applied.length, 0, "not before the interval");
    timers.advance(1);
    for (let i = 0; i < 100 && applied.length === 0; i++) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    assert.equal(applied.length, 1);
    assert.equal(timers.armed, 1, "the next poll is armed once the check ended");
    reloader.stop();
    assert.equal(timers.armed, 0);
    const off = new CertReloader({
      what: "off",
      files: FILES,
      intervalMs: 0,
      initial: {},
      apply: () => undefined,
      logger: recordingLogger(),
      timers,
    });
    off.start();
    assert.equal(timers.armed, 0);
  });

  test("earliestExpiry: the first CA of a bundle to expire", () => {
    const soon = new Date(new X509Certificate(one.certPem).validTo);
    assert.deepEqual(earliestExpiry(Buffer.from(two.certPem + one.certPem)), soon);
    assert.equal(earliestExpiry(Buffer.from("nothing")), undefined);
    assert.equal(earliestExpiry(undefined), undefined);
  });

  test("checkTlsMaterial and tlsDigest", () => {
    const good = materialOf(disk(one));
    checkTlsMaterial(FILES, good);
    assert.throws(
      () => checkTlsMaterial(FILES, { ...good, key: Buffer.from(two.keyPem) }),
      (err: Error) => err instanceof TlsFileError && err.flag === "--server-key",
    );
    assert.notEqual(tlsDigest(good), tlsDigest({ ...good, ca: Buffer.concat([good.ca!, good.ca!]) }));
    assert.notEqual(
      tlsDigest({ cert: Buffer.from("ab"), key: Buffer.from("c") }),
      tlsDigest({ cert: Buffer.from("a"), key: Buffer.from("bc") }),
    );
  });
});
