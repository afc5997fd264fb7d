import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import tls from "node:tls";
import {
  AGENT_CLUSTER_URI_PREFIX,
  CertificateError,
  clusterNamesFromCertificate,
  createCertificateAuthority,
  ensureStandaloneCerts,
  issueCertificate,
  writeStandaloneCerts,
  type CertificateAndKey,
  type StandaloneCertPaths,
} from "./index.js";

const SERVER_AUTH = "1.3.6.1.5.5.7.3.1";
const CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";

function hasOpenssl(): boolean {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

function opensslVerify(caFile: string, certFile: string, purpose: "sslserver" | "sslclient"): string {
  return execFileSync("openssl", ["verify", "-purpose", purpose, "-CAfile", caFile, certFile], {
    encoding: "utf8",
  });
}

/** Accept one TLS connection with client-certificate auth; resolve with what each side saw. */
async function mtlsHandshake(
  server: { cert: string; key: string; ca: string },
  client: { cert: string; key: string; ca: string; servername?: string; host?: string },
): Promise<{ peerRaw: Buffer; authorized: boolean; reply: string }> {
  const srv = tls.createServer({ ...server, requestCert: true, rejectUnauthorized: true }, (socket) => {
    socket.end(`hello ${socket.authorized ? "authorized" : "unauthorized"}`);
  });
  const seen: { peerRaw?: Buffer } = {};
  srv.on("secureConnection", (socket: tls.TLSSocket) => {
    seen.peerRaw = socket.getPeerCertificate().raw;
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address() as { port: number };
  try {
    const sock = tls.connect({
      host: client.host ?? "127.0.0.1",
      port,
      cert: client.cert,
      key: client.key,
      ca: client.ca,
      servername: client.servername,
    });
    const chunks: Buffer[] = [];
    sock.on("data", (c: Buffer) => chunks.push(c));
    await once(sock, "secureConnect");
    const authorized = sock.authorized;
    await once(sock, "end");
    sock.destroy();
    assert.ok(seen.peerRaw, "server saw a client certificate");
    return { peerRaw: seen.peerRaw, authorized, reply: Buffer.concat(chunks).toString() };
  } finally {
    srv.close();
  }
}

describe("createCertificateAuthority / issueCertificate", () => {
  for (const keyAlgorithm of ["ECDSA-P256", "RSA-2048"] as const) {
    test(`${keyAlgorithm}: CA is self-signed, a CA, and issues verifiable leaves`, async () => {
      const ca = await createCertificateAuthority({ commonName: "test-ca", validityDays: 10, keyAlgorithm });
      const caCert = new X509Certificate(ca.certPem);
      assert.equal(caCert.ca, true);
      assert.ok(caCert.checkIssued(caCert));
      assert.ok(caCert.verify(caCert.publicKey));
      assert.match(caCert.subject, /CN=test-ca/);
      assert.match(ca.keyPem, /^-----BEGIN PRIVATE KEY-----\n/);
      assert.ok(caCert.checkPrivateKey(createPrivateKey(ca.keyPem)));
      assert.equal(caCert.publicKey.asymmetricKeyType, keyAlgorithm === "RSA-2048" ? "rsa" : "ec");
      const days = (Date.parse(caCert.validTo) - Date.now()) / 86_400_000;
      assert.ok(days > 9.9 && days <= 10, `CA valid for ${days} days`);

      const leaf = await issueCertificate(ca, {
        commonName: "leaf",
        dnsNames: ["hub.example", "localhost"],
        ipAddresses: ["127.0.0.1", "::1"],
        uris: ["spiffe://example/leaf"],
        usage: "both",
        validityDays: 2,
        organization: "acme",
        keyAlgorithm,
      });
      const leafCert = new X509Certificate(leaf.certPem);
      assert.equal(leafCert.ca, false);
      assert.ok(leafCert.checkIssued(caCert));
      assert.ok(leafCert.verify(caCert.publicKey));
      assert.ok(leafCert.checkPrivateKey(createPrivateKey(leaf.keyPem)));
      assert.match(leafCert.subject, /O=acme/);
      assert.match(leafCert.subject, /CN=leaf/);
      assert.equal(leafCert.issuer, caCert.subject);
      assert.deepEqual(leafCert.keyUsage?.slice().sort(), [SERVER_AUTH, CLIENT_AUTH]);
      assert.equal(leafCert.checkHost("hub.example"), "hub.example");
      assert.equal(leafCert.checkIP("127.0.0.1"), "127.0.0.1");
      assert.equal(leafCert.checkIP("::1"), "::1");
      assert.equal(leafCert.checkHost("other.example"), undefined);
      assert.match(leafCert.subjectAltName ?? "", /URI:spiffe:\/\/example\/leaf/);
    });
  }

  test("usage decides the extended key usage", async () => {
    const ca = await createCertificateAuthority({ commonName: "ca" });
    const server = new X509Certificate((await issueCertificate(ca, { commonName: "s", usage: "server" })).certPem);
    const client = new X509Certificate((await issueCertificate(ca, { commonName: "c", usage: "client" })).certPem);
    assert.deepEqual(server.keyUsage, [SERVER_AUTH]);
    assert.deepEqual(client.keyUsage, [CLIENT_AUTH]);
    assert.equal(client.subjectAltName, undefined);
  });

  test("bad input is refused with an error naming it", async () => {
    const ca = await createCertificateAuthority({ commonName: "ca" });
    await assert.rejects(
      issueCertificate(ca, { commonName: "x", ipAddresses: ["300.1.1.1"], usage: "server" }),
      (err: Error) => err instanceof CertificateError && /ipAddresses: "300\.1\.1\.1"/.test(err.message),
    );
    await assert.rejects(
      issueCertificate(ca, { commonName: "x", dnsNames: ["10.0.0.1"], usage: "server" }),
      /dnsNames: "10\.0\.0\.1" is not a DNS name/,
    );
    await assert.rejects(issueCertificate(ca, { commonName: " ", usage: "server" }), /commonName/);
    await assert.rejects(issueCertificate(ca, { commonName: "x", usage: "server", validityDays: 0 }), /validityDays/);
    await assert.rejects(
      issueCertificate({ certPem: ca.certPem, keyPem: "garbage" }, { commonName: "x", usage: "server" }),
      /CA key: not a readable PEM private key/,
    );
    await assert.rejects(
      issueCertificate({ certPem: "garbage", keyPem: ca.keyPem }, { commonName: "x", usage: "server" }),
      /CA certificate/,
    );
  });
});

describe("clusterNamesFromCertificate", () => {
  let ca: CertificateAndKey;
  before(async () => {
    ca = await createCertificateAuthority({ commonName: "ca" });
  });

  test("reads every granted cluster from PEM, DER and node certificates", async () => {
    const leaf = await issueCertificate(ca, {
      commonName: "agent",
      dnsNames: ["east"],
      uris: [
        `${AGENT_CLUSTER_URI_PREFIX}east`,
        "spiffe://ignored/east",
        `${AGENT_CLUSTER_URI_PREFIX}0west`,
        `${AGENT_CLUSTER_URI_PREFIX}east`,
      ],
      usage: "client",
    });
    const node = new X509Certificate(leaf.certPem);
    assert.deepEqual(clusterNamesFromCertificate(leaf.certPem), ["east", "0west"]);
    assert.deepEqual(clusterNamesFromCertificate(node.raw), ["east", "0west"]);
    assert.deepEqual(clusterNamesFromCertificate(node), ["east", "0west"]);
    assert.deepEqual(clusterNamesFromCertificate(leaf.certPem + ca.certPem), ["east", "0west"]);
  });

  test("a certificate without cluster SANs grants nothing; garbage throws", async () => {
    const leaf = await issueCertificate(ca, { commonName: "east", dnsNames: ["east"], usage: "client" });
    assert.deepEqual(clusterNamesFromCertificate(leaf.certPem), []);
    assert.deepEqual(clusterNamesFromCertificate(ca.certPem), []);
    assert.throws(() => clusterNamesFromCertificate("not a certificate"), /not a PEM certificate/);
    assert.throws(() => clusterNamesFromCertificate(new Uint8Array([1, 2, 3])));
  });
});

describe("writeStandaloneCerts", () => {
  let dir: string;
  let paths: StandaloneCertPaths;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-pki-"));
    paths = await writeStandaloneCerts(join(dir, "certs"), { clusters: ["east", "0west"] });
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test("writes the whole set with private keys mode 0600", async () => {
    const base = join(dir, "certs");
    assert.equal(paths.ca.cert, join(base, "ca.crt"));
    assert.equal(paths.server.key, join(base, "server.key"));
    assert.equal(paths.client.cert, join(base, "client.crt"));
    assert.deepEqual([...paths.agents.keys()], ["east", "0west"]);
    assert.equal(paths.agents.get("0west")?.cert, join(base, "agent-0west.crt"));
    for (const p of [paths.ca, paths.server, paths.client, ...paths.agents.values()]) {
      assert.equal((await stat(p.key)).mode & 0o777, 0o600, p.key);
      assert.equal((await stat(p.cert)).isFile(), true, p.cert);
    }
  });

  test("certificates chain to the CA with the right SANs and usages", async () => {
    const ca = new X509Certificate(await readFile(paths.ca.cert));
    const server = new X509Certificate(await readFile(paths.server.cert));
    const client = new X509Certificate(await readFile(paths.client.cert));
    for (const cert of [server, client, ...[...paths.agents.values()].map((p) => p.cert)]) {
      const c = typeof cert === "string" ? new X509Certificate(await readFile(cert)) : cert;
      assert.ok(c.checkIssued(ca) && c.verify(ca.publicKey), c.subject);
    }
    assert.equal(server.checkHost("localhost"), "localhost");
    assert.equal(server.checkIP("127.0.0.1"), "127.0.0.1");
    assert.equal(server.checkIP("::1"), "::1");
    assert.deepEqual(server.keyUsage?.slice().sort(), [SERVER_AUTH, CLIENT_AUTH]);
    assert.deepEqual(client.keyUsage, [CLIENT_AUTH]);
    const east = await readFile(paths.agents.get("east")!.cert, "utf8");
    assert.deepEqual(new X509Certificate(east).keyUsage, [CLIENT_AUTH]);
    assert.deepEqual(clusterNamesFromCertificate(east), ["east"]);
    assert.deepEqual(clusterNamesFromCertificate(await readFile(paths.agents.get("0west")!.cert)), ["0west"]);
  });

  test("openssl verifies the chain and purposes", { skip: !hasOpenssl() && "openssl not installed" }, () => {
    assert.match(opensslVerify(paths.ca.cert, paths.server.cert, "sslserver"), /OK/);
    assert.match(opensslVerify(paths.ca.cert, paths.server.cert, "sslclient"), /OK/);
    assert.match(opensslVerify(paths.ca.cert, paths.client.cert, "sslclient"), /OK/);
    assert.match(opensslVerify(paths.ca.cert, paths.agents.get("east")!.cert, "sslclient"), /OK/);
    assert.throws(() => opensslVerify(paths.ca.cert, paths.client.cert, "sslserver"));
  });

  test("a real mTLS handshake works with the issued certificates", async () => {
    const read = (p: string) => readFile(p, "utf8");
    const caPem = await read(paths.ca.cert);
    const server = { cert: await read(paths.server.cert), key: await read(paths.server.key), ca: caPem };
    const agent = paths.agents.get("east")!;
    const result = await mtlsHandshake(server, {
      cert: await read(agent.cert),
      key: await read(agent.key),
      ca: caPem,
      servername: "localhost",
    });
    assert.equal(result.authorized, true);
    assert.equal(result.reply, "hello authorized");
    assert.deepEqual(clusterNamesFromCertificate(result.peerRaw), ["east"]);
    // The hub's own client certificate, and the server cert checked against an IP.
    const viaIp = await mtlsHandshake(server, {
      cert: await read(paths.client.cert),
      key: await read(paths.client.key),
      ca: caPem,
    });
    assert.equal(viaIp.authorized, true);
  });

  test("a client certificate from another CA is refused", async () => {
    const read = (p: string) => readFile(p, "utf8");
    const other = await createCertificateAuthority({ commonName: "other" });
    const stranger = await issueCertificate(other, {
      commonName: "x",
      uris: [`${AGENT_CLUSTER_URI_PREFIX}east`],
      usage: "client",
    });
    await assert.rejects(
      mtlsHandshake(
        { cert: await read(paths.server.cert), key: await read(paths.server.key), ca: await read(paths.ca.cert) },
        { cert: stranger.certPem, key: stranger.keyPem, ca: await read(paths.ca.cert) },
      ),
    );
  });

  test("refuses to replace an existing CA unless forced", async () => {
    const target = join(dir, "certs");
    const before = await readFile(paths.ca.cert, "utf8");
    await assert.rejects(
      writeStandaloneCerts(target, { clusters: ["east"] }),
      (err: Error) => err instanceof CertificateError && err.message.includes(join(target, "ca.crt")),
    );
    assert.equal(await readFile(paths.ca.cert, "utf8"), before);
    const forced = await writeStandaloneCerts(target, { clusters: ["east", "0west"], force: true });
    assert.notEqual(await readFile(forced.ca.cert, "utf8"), before);
    assert.equal((await stat(forced.ca.key)).mode & 0o777, 0o600);
  });

  test("bad cluster names and empty hub hosts are refused", async () => {
    await assert.rejects(writeStandaloneCerts(join(dir, "bad"), { clusters: ["East/1"] }), /cluster name "East\/1"/);
    await assert.rejects(writeStandaloneCerts(join(dir, "bad"), { clusters: [], hubHosts: [" "] }), /hubHosts/);
  });
});

describe("ensureStandaloneCerts", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cp-pki-ensure-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test("creates, reuses, and reissues only what no longer fits", async () => {
    const first = await ensureStandaloneCerts(dir, { clusters: ["east"] });
    assert.equal(first.written.length, 8);
    const caPem = await readFile(first.paths.ca.cert, "utf8");

    const again = await ensureStandaloneCerts(dir, { clusters: ["east"] });
    assert.deepEqual(again.written, []);

    const more = await ensureStandaloneCerts(dir, { clusters: ["east", "west"], hubHosts: ["hub.local", "127.0.0.1"] });
    assert.deepEqual(more.written.sort(), [
      join(dir, "agent-west.crt"),
      join(dir, "agent-west.key"),
      join(dir, "server.crt"),
      join(dir, "server.key"),
    ]);
    assert.equal(await readFile(more.paths.ca.cert, "utf8"), caPem);
    const server = new X509Certificate(await readFile(more.paths.server.cert));
    assert.equal(server.checkHost("hub.local"), "hub.local");

    // A leaf that does not match its key is reissued.
    await writeFile(more.paths.agents.get("east")!.key, (await readFile(more.paths.client.key, "utf8")) + "");
    const repaired = await ensureStandaloneCerts(dir, { clusters: ["east", "west"], hubHosts: ["hub.local"] });
    assert.ok(repaired.written.includes(join(dir, "agent-east.crt")));
  });

  test("a half-present CA is refused", async () => {
    const half = await mkdtemp(join(tmpdir(), "cp-pki-half-"));
    try {
      await writeFile(join(half, "ca.crt"), "x");
      await assert.rejects(ensureStandaloneCerts(half, { clusters: [] }), /only one of ca\.crt and ca\.key/);
    } finally {
      await rm(half, { recursive: true, force: true });
    }
  });
});
