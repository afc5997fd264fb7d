import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import tls from "node:tls";
import { AGENT_CLUSTER_URI_PREFIX, clusterNamesFromSubjectAltName } from "./agent-identity.js";
import {
  CertificateError,
  clusterNamesFromCertificate,
  createCertificateAuthority,
  SingleCaLayoutError,
  ensureStandaloneCerts,
  existingStandaloneCerts,
  issueCertificate,
  writeStandaloneCerts,
  type CertificateAndKey,
  type StandaloneCertPaths,
} from "./index.js";
import { isSingleCaLayout } from "./standalone-certs.js";

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

  test("a URI with a comma or a quote grants exactly its own text, never a second name (node quotes such values)", async () => {
    const leaf = await issueCertificate(ca, {
      commonName: "agent",
      uris: [
        `${AGENT_CLUSTER_URI_PREFIX}a,URI:${AGENT_CLUSTER_URI_PREFIX}b`,
        `${AGENT_CLUSTER_URI_PREFIX}c"d`,
        `${AGENT_CLUSTER_URI_PREFIX}ok`,
      ],
      usage: "client",
    });
    const san = new X509Certificate(leaf.certPem).subjectAltName ?? "";
    assert.match(san, /URI:"cluster-proxy:\/\/cluster\/a\\u002cURI:/);
    const expected = [`a,URI:${AGENT_CLUSTER_URI_PREFIX}b`, 'c"d', "ok"];
    assert.deepEqual(clusterNamesFromCertificate(leaf.certPem), expected);
    assert.deepEqual(clusterNamesFromSubjectAltName(san), expected);
  });

  test("node's subject-alternative-name text: entry types, quoted values, and text that does not parse", () => {
    const P = AGENT_CLUSTER_URI_PREFIX;
    assert.deepEqual(clusterNamesFromSubjectAltName(undefined), []);
    assert.deepEqual(clusterNamesFromSubjectAltName(""), []);
    assert.deepEqual(
      clusterNamesFromSubjectAltName(
        `DNS:east, IP Address:10.0.0.1, DirName:"CN=x, O=${P}evil", URI:${P}east, email:a@b, URI:"${P}x\\"q, URI:${P}y", URI:${P}%ZZ, URI:${P}we%73t`,
      ),
      ["east", `x"q, URI:${P}y`, "west"],
    );
    assert.throws(
      () => clusterNamesFromSubjectAltName(`URI:"${P}unterminated`),
      /unreadable subject alternative names/,
    );
    assert.throws(() => clusterNamesFromSubjectAltName(`, URI:${P}east`), /unreadable subject alternative names/);
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
    assert.equal(paths.clientCa.cert, join(base, "client-ca.crt"));
    assert.equal(paths.agentCa.key, join(base, "agent-ca.key"));
    assert.equal(paths.server.key, join(base, "server.key"));
    assert.equal(paths.client.cert, join(base, "client.crt"));
    assert.deepEqual([...paths.agents.keys()], ["east", "0west"]);
    assert.equal(paths.agents.get("0west")?.cert, join(base, "agent-0west.crt"));
    for (const p of [paths.ca, paths.clientCa, paths.agentCa, paths.server, paths.client, ...paths.agents.values()]) {
      assert.equal((await stat(p.key)).mode & 0o777, 0o600, p.key);
      assert.equal((await stat(p.cert)).isFile(), true, p.cert);
    }
  });

  test("three distinct CAs; each leaf chains to the CA of its role only, with its role's usages", async () => {
    const load = async (f: string) => new X509Certificate(await readFile(f));
    const cas = {
      serving: await load(paths.ca.cert),
      client: await load(paths.clientCa.cert),
      agent: await load(paths.agentCa.cert),
    };
    for (const ca of Object.values(cas)) assert.equal(ca.ca, true);
    assert.equal(new Set(Object.values(cas).map((c) => c.fingerprint256)).size, 3);
    const leaves = {
      serving: [await load(paths.server.cert)],
      client: [await load(paths.client.cert)],
      agent: await Promise.all([...paths.agents.values()].map((p) => load(p.cert))),
    };
    for (const [role, certs] of Object.entries(leaves))
      for (const cert of certs)
        for (const [caRole, ca] of Object.entries(cas))
          assert.equal(
            cert.checkIssued(ca) && cert.verify(ca.publicKey),
            role === caRole,
            `${cert.subject} vs ${caRole} CA`,
          );
    const server = leaves.serving[0]!;
    assert.equal(server.checkHost("localhost"), "localhost");
    assert.equal(server.checkIP("127.0.0.1"), "127.0.0.1");
    assert.equal(server.checkIP("::1"), "::1");
    assert.deepEqual(server.keyUsage, [SERVER_AUTH]);
    assert.deepEqual(leaves.client[0]!.keyUsage, [CLIENT_AUTH]);
    const east = await readFile(paths.agents.get("east")!.cert, "utf8");
    assert.deepEqual(new X509Certificate(east).keyUsage?.slice().sort(), [SERVER_AUTH, CLIENT_AUTH].sort());
    assert.deepEqual(clusterNamesFromCertificate(east), ["east"]);
    assert.deepEqual(clusterNamesFromCertificate(await readFile(paths.agents.get("0west")!.cert)), ["0west"]);
  });

  test("openssl verifies the chains and purposes", { skip: !hasOpenssl() && "openssl not installed" }, () => {
    assert.match(opensslVerify(paths.ca.cert, paths.server.cert, "sslserver"), /OK/);
    assert.throws(() => opensslVerify(paths.ca.cert, paths.server.cert, "sslclient"), "serving only");
    assert.match(opensslVerify(paths.clientCa.cert, paths.client.cert, "sslclient"), /OK/);
    assert.match(opensslVerify(paths.agentCa.cert, paths.agents.get("east")!.cert, "sslclient"), /OK/);
    // The agent's gateway endpoint serves with its agent certificate.
    assert.match(opensslVerify(paths.agentCa.cert, paths.agents.get("east")!.cert, "sslserver"), /OK/);
    assert.throws(() => opensslVerify(paths.clientCa.cert, paths.client.cert, "sslserver"));
    assert.throws(() => opensslVerify(paths.clientCa.cert, paths.agents.get("east")!.cert, "sslclient"));
    assert.throws(() => opensslVerify(paths.agentCa.cert, paths.client.cert, "sslclient"));
    assert.throws(() => opensslVerify(paths.ca.cert, paths.client.cert, "sslclient"));
  });

  test("real mTLS handshakes: each door accepts its role and refuses the other", async () => {
    const read = (p: string) => readFile(p, "utf8");
    const caPem = await read(paths.ca.cert);
    const door = async (ca: string) => ({
      cert: await read(paths.server.cert),
      key: await read(paths.server.key),
      ca: await read(ca),
    });
    const clientDoor = await door(paths.clientCa.cert);
    const agentDoor = await door(paths.agentCa.cert);
    const agent = paths.agents.get("east")!;
    const asAgent = { cert: await read(agent.cert), key: await read(agent.key), ca: caPem, servername: "localhost" };
    const asClient = { cert: await read(paths.client.cert), key: await read(paths.client.key), ca: caPem };
    const result = await mtlsHandshake(agentDoor, asAgent);
    assert.equal(result.authorized, true);
    assert.equal(result.reply, "hello authorized");
    assert.deepEqual(clusterNamesFromCertificate(result.peerRaw), ["east"]);
    // The hub's own client certificate, and the server cert checked against an IP.
    assert.equal((await mtlsHandshake(clientDoor, asClient)).authorized, true);
    await assert.rejects(mtlsHandshake(clientDoor, asAgent), "agent certificate at a client door");
    await assert.rejects(mtlsHandshake(agentDoor, asClient), "client certificate at the agent door");
  });

  test("a certificate that is not a serving certificate cannot act as the hub", async () => {
    const read = (p: string) => readFile(p, "utf8");
    const caPem = await read(paths.ca.cert);
    const servingCa = { certPem: await read(paths.ca.cert), keyPem: await read(paths.ca.key) };
    // A client-only certificate signed by the serving CA (which the set never issues) is refused
    // by a peer checking the server: the usage is enforced, not just the chain.
    const clientOnly = await issueCertificate(servingCa, {
      commonName: "impostor",
      dnsNames: ["localhost"],
      ipAddresses: ["127.0.0.1"],
      usage: "client",
    });
    const agent = paths.agents.get("east")!;
    await assert.rejects(
      mtlsHandshake(
        { cert: clientOnly.certPem, key: clientOnly.keyPem, ca: await read(paths.agentCa.cert) },
        { cert: await read(agent.cert), key: await read(agent.key), ca: caPem },
      ),
      /(unsupported|unsuitable) certificate purpose/,
    );
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
        { cert: await read(paths.server.cert), key: await read(paths.server.key), ca: await read(paths.agentCa.cert) },
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
    await assert.rejects(writeStandaloneCerts(join(dir, "bad"), { clusters: ["ca"] }), /"ca" cannot be used/);
    await assert.rejects(writeStandaloneCerts(join(dir, "bad"), { clusters: [], hubHosts: [" "] }), /hubHosts/);
  });
});

/** Write the single-CA layout of older releases: one CA signing a server+client server cert, the client and agents. */
async function writeSingleCaLayout(dir: string, clusters: string[], hubHosts: string[]): Promise<CertificateAndKey> {
  const { mkdir } = await import("node:fs/promises");
  await mkdir(dir, { recursive: true });
  const ca = await createCertificateAuthority({ commonName: "cluster-proxy-ca" });
  const put = async (base: string, pem: CertificateAndKey): Promise<void> => {
    await writeFile(join(dir, `${base}.crt`), pem.certPem);
    await writeFile(join(dir, `${base}.key`), pem.keyPem, { mode: 0o600 });
  };
  await put("ca", ca);
  await put(
    "server",
    await issueCertificate(ca, { commonName: "cluster-proxy-server", dnsNames: hubHosts, usage: "both" }),
  );
  await put("client", await issueCertificate(ca, { commonName: "cluster-proxy-client", usage: "client" }));
  for (const c of clusters)
    await put(
      `agent-${c}`,
      await issueCertificate(ca, { commonName: c, uris: [`${AGENT_CLUSTER_URI_PREFIX}${c}`], usage: "client" }),
    );
  return ca;
}

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
    assert.equal(first.written.length, 12);
    assert.equal(first.migrated, false);
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
    assert.deepEqual(await existingStandaloneCerts(dir), {
      clusters: ["east", "west"],
      hubHosts: ["hub.local", "127.0.0.1"],
    });

    // A leaf that does not match its key is reissued.
    await writeFile(more.paths.agents.get("east")!.key, (await readFile(more.paths.client.key, "utf8")) + "");
    const repaired = await ensureStandaloneCerts(dir, { clusters: ["east", "west"], hubHosts: ["hub.local"] });
    assert.ok(repaired.written.includes(join(dir, "agent-east.crt")));

    // A client certificate signed by the agent CA (shared trust) is reissued from the client CA.
    const agentCa = {
      certPem: await readFile(more.paths.agentCa.cert, "utf8"),
      keyPem: await readFile(more.paths.agentCa.key, "utf8"),
    };
    const wrong = await issueCertificate(agentCa, { commonName: "x", usage: "client" });
    await writeFile(more.paths.client.cert, wrong.certPem);
    await writeFile(more.paths.client.key, wrong.keyPem);
    const fixed = await ensureStandaloneCerts(dir, { clusters: ["east", "west"], hubHosts: ["hub.local"] });
    assert.deepEqual(fixed.written.sort(), [join(dir, "client.crt"), join(dir, "client.key")]);

    // A clientAuth-only agent certificate (from before the gateway endpoint) is reissued with serverAuth too.
    const old = await issueCertificate(agentCa, {
      commonName: "east",
      uris: [`${AGENT_CLUSTER_URI_PREFIX}east`],
      usage: "client",
    });
    await writeFile(more.paths.agents.get("east")!.cert, old.certPem);
    await writeFile(more.paths.agents.get("east")!.key, old.keyPem);
    const upgraded = await ensureStandaloneCerts(dir, { clusters: ["east", "west"], hubHosts: ["hub.local"] });
    assert.deepEqual(upgraded.written.sort(), [join(dir, "agent-east.crt"), join(dir, "agent-east.key")]);
    const reissued = new X509Certificate(await readFile(more.paths.agents.get("east")!.cert));
    assert.deepEqual(reissued.keyUsage?.slice().sort(), [SERVER_AUTH, CLIENT_AUTH].sort());
  });

  test("a half-present CA is refused", async () => {
    const half = await mkdtemp(join(tmpdir(), "cp-pki-half-"));
    try {
      await writeFile(join(half, "ca.crt"), "x");
      await assert.rejects(ensureStandaloneCerts(half, { clusters: [] }), /only one of .*ca\.crt and .*ca\.key/);
    } finally {
      await rm(half, { recursive: true, force: true });
    }
  });

  test("CAs sharing a key are refused", async () => {
    const shared = await mkdtemp(join(tmpdir(), "cp-pki-shared-"));
    try {
      const { paths } = await ensureStandaloneCerts(shared, { clusters: [] });
      for (const ext of ["crt", "key"] as const)
        await writeFile(join(shared, `agent-ca.${ext}`), await readFile(join(shared, `client-ca.${ext}`)));
      await assert.rejects(
        ensureStandaloneCerts(shared, { clusters: [] }),
        (err: Error) =>
          err instanceof CertificateError &&
          err.message.includes(paths.agentCa.cert) &&
          /must be distinct/.test(err.message),
      );
    } finally {
      await rm(shared, { recursive: true, force: true });
    }
  });

  test("the single-CA layout of older releases is refused by writeStandaloneCerts and split by ensureStandaloneCerts", async () => {
    const old = await mkdtemp(join(tmpdir(), "cp-pki-old-"));
    try {
      const oldCa = await writeSingleCaLayout(old, ["east"], ["hub.local"]);
      assert.equal(await isSingleCaLayout(old), true);
      await assert.rejects(
        writeStandaloneCerts(old, { clusters: ["east"] }),
        (err: Error) =>
          err instanceof SingleCaLayoutError &&
          err.dir === old &&
          /agent certificate is accepted at the client front doors/.test(err.message),
      );
      assert.deepEqual(await existingStandaloneCerts(old), { clusters: ["east"], hubHosts: ["hub.local"] });

      const split = await ensureStandaloneCerts(old, { clusters: ["east"], hubHosts: ["hub.local"] });
      assert.equal(split.migrated, true);
      assert.equal(await isSingleCaLayout(old), false);
      assert.equal(
        await readFile(split.paths.ca.cert, "utf8"),
        oldCa.certPem,
        "ca.crt stays: clients and agents keep verifying the hub",
      );
      for (const f of ["client-ca.crt", "agent-ca.crt", "server.crt", "client.crt", "agent-east.crt"])
        assert.ok(split.written.includes(join(old, f)), `${f} written`);
      const load = async (f: string) => new X509Certificate(await readFile(f));
      const ca = await load(split.paths.ca.cert);
      const client = await load(split.paths.client.cert);
      const east = await load(split.paths.agents.get("east")!.cert);
      const server = await load(split.paths.server.cert);
      assert.ok(client.checkIssued(await load(split.paths.clientCa.cert)) && !client.checkIssued(ca));
      assert.ok(east.checkIssued(await load(split.paths.agentCa.cert)) && !east.checkIssued(ca));
      assert.ok(server.checkIssued(ca));
      assert.deepEqual(server.keyUsage, [SERVER_AUTH]);
      assert.equal(server.checkHost("hub.local"), "hub.local");

      const again = await ensureStandaloneCerts(old, { clusters: ["east"], hubHosts: ["hub.local"] });
      assert.equal(again.migrated, false);
      assert.deepEqual(again.written, []);
    } finally {
      await rm(old, { recursive: true, force: true });
    }
  });
});
