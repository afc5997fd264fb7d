/**
 * Certificate hot reload of a real proxy-server process: its serving certificate and the client
 * CA bundle are replaced the way a Kubernetes Secret volume replaces them (a `..data` symlink
 * swapped atomically) while an agent tunnel carries a long transfer. The transfer completes
 * byte-exact, new handshakes see the new certificate (by serial), a client certificate from a CA
 * added to the bundle is accepted only after the reload, and a bad file is refused and logged
 * with the old certificate kept.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, X509Certificate } from "node:crypto";
import { once } from "node:events";
import { mkdir, readFile, rename, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import * as tls from "node:tls";
import { TunnelClient } from "@cluster-proxy/client";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "@cluster-proxy/pki";
import { Harness, patternHash, transferServer } from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";

const h = new Harness();
after(() => h.close());

const TOTAL = 48 * 1024 * 1024;
const SEED = 1313;

/** A Secret-volume-like directory: files are symlinks into `..data`, which is swapped atomically. */
class SecretVolume {
  private version = 0;
  constructor(readonly dir: string) {}
  path(name: string): string {
    return join(this.dir, name);
  }
  async write(files: Record<string, string>): Promise<void> {
    const first = this.version === 0;
    const versionDir = join(this.dir, `..v${++this.version}`);
    await mkdir(versionDir, { recursive: true });
    for (const [name, text] of Object.entries(files)) await writeFile(join(versionDir, name), text, { mode: 0o600 });
    await symlink(`..v${this.version}`, join(this.dir, "..data_tmp"));
    await rename(join(this.dir, "..data_tmp"), join(this.dir, "..data"));
    if (first) for (const name of Object.keys(files)) await symlink(join("..data", name), join(this.dir, name));
  }
}

/** The certificate a TLS server presents to a new handshake. */
async function servingSerial(port: number, ca: Buffer, alpn: string): Promise<string> {
  const s = tls.connect({ host: "127.0.0.1", port, ca, servername: "localhost", ALPNProtocols: [alpn] });
  s.on("error", () => undefined);
  try {
    await once(s, "secureConnect");
    return s.getPeerCertificate().serialNumber;
  } finally {
    s.destroy();
  }
}

async function metric(port: number, series: string): Promise<number> {
  const { body } = await httpGet(`http://127.0.0.1:${port}/metrics`);
  const line = body.split("\n").find((l) => l.startsWith(series + " "));
  return line ? Number(line.split(" ").pop()) : 0;
}

test("the server reloads its certificates without a restart and without dropping an agent tunnel", async () => {
  await h.init(["east"]);
  const c = h.certs;
  const text = (p: string): Promise<string> => readFile(p, "utf8");
  const servingCa: CertificateAndKey = { certPem: await text(c.ca.cert), keyPem: await text(c.ca.key) };
  const caPem = Buffer.from(servingCa.certPem);
  const volume = new SecretVolume(join(h.dir, "secret"));
  await mkdir(volume.dir);
  await volume.write({
    "tls.crt": await text(c.server.cert),
    "tls.key": await text(c.server.key),
    "client-ca.crt": await text(c.clientCa.cert),
    "agent-ca.crt": await text(c.agentCa.cert),
  });
  const { proc, ports } = await h.startServer([
    `--server-cert=${volume.path("tls.crt")}`,
    `--server-key=${volume.path("tls.key")}`,
    `--server-ca-cert=${volume.path("client-ca.crt")}`,
    `--cluster-cert=${volume.path("tls.crt")}`,
    `--cluster-key=${volume.path("tls.key")}`,
    `--cluster-ca-cert=${volume.path("agent-ca.crt")}`,
    "--cert-reload-interval=100ms",
    "--log-level=info",
  ]);
  const agent = await h.startAgent("east", ports.agent);
  const target = await transferServer(h);
  const oldSerial = new X509Certificate(await readFile(c.server.cert)).serialNumber;
  assert.equal(await servingSerial(ports.server, caPem, "h2"), oldSerial);
  const expiry = await metric(
    ports.health,
    'cluster_proxy_server_certificate_expiry_timestamp_seconds{flag="--server-cert"}',
  );
  assert.equal(expiry, Date.parse(new X509Certificate(await readFile(c.server.cert)).validTo) / 1000);

  // A long download through the agent tunnel, paused after its first MiB so it spans the swaps.
  const clientTls = { ca: caPem, cert: await readFile(c.client.cert), key: await readFile(c.client.key) };
  const client = new TunnelClient({ proxy: { host: "127.0.0.1", port: ports.server, ...clientTls } });
  h.onClose(() => client.close());
  const socket = await client.dial(`localhost.east:${target}`);
  const hash = createHash("sha256");
  let received = 0;
  const done = new Promise<void>((resolve, reject) => {
    socket.on("data", (chunk: Buffer) => {
      hash.update(chunk);
      received += chunk.length;
      if (received >= 1024 * 1024 && received - chunk.length < 1024 * 1024) socket.pause();
    });
    socket.once("end", () => resolve());
    socket.once("error", reject);
  });
  socket.write(`source ${TOTAL} ${SEED}\n`);
  await waitFor("the first MiB", () => received >= 1024 * 1024, 30_000);

  // 1. New serving certificate (same serving CA) and a client CA bundle with a second CA.
  const newServer = await issueCertificate(servingCa, {
    commonName: "cluster-proxy-server",
    dnsNames: ["localhost"],
    ipAddresses: ["127.0.0.1"],
    usage: "server",
  });
  const newSerial = new X509Certificate(newServer.certPem).serialNumber;
  assert.notEqual(newSerial, oldSerial);
  const secondClientCa = await createCertificateAuthority({ commonName: "second-client-ca" });
  const secondClient = await issueCertificate(secondClientCa, { commonName: "second-client", usage: "client" });
  const asSecond = new TunnelClient({
    proxy: { host: "127.0.0.1", port: ports.server, ca: caPem, cert: secondClient.certPem, key: secondClient.keyPem },
  });
  h.onClose(() => asSecond.close());
  await assert.rejects(asSecond.dial(`localhost.east:${target}`), "not trusted before the reload");
  await volume.write({
    "tls.crt": newServer.certPem,
    "tls.key": newServer.keyPem,
    "client-ca.crt": (await text(c.clientCa.cert)) + secondClientCa.certPem,
    "agent-ca.crt": await text(c.agentCa.cert),
  });
  await waitFor(
    "new handshakes to see the new certificate",
    async () => (await servingSerial(ports.server, caPem, "h2")) === newSerial,
    20_000,
    100,
  );
  assert.equal(await servingSerial(ports.httpConnect, caPem, "http/1.1"), newSerial, "HTTP CONNECT door");
  // The agent port has a reloader of its own, polling on its own timer: it may see the swap later.
  await waitFor(
    "the agent port to see the new certificate",
    async () => (await servingSerial(ports.agent, caPem, "h2")) === newSerial,
    20_000,
    100,
  );
  const viaSecond = await asSecond.dial(`localhost.east:${target}`);
  viaSecond.destroy();
  await waitFor("both reloads to be logged", () =>
    ["client front doors", "agent port"].every((what) =>
      proc.output().includes(`reloaded TLS certificates of the ${what}`),
    ),
  );
  assert.equal(
    await metric(ports.health, 'cluster_proxy_server_certificate_reloads_total{listener="front",result="success"}'),
    1,
  );

  // 2. A bad key (another certificate's): refused, logged naming flag and file, old context kept.
  const other = await issueCertificate(servingCa, { commonName: "other", dnsNames: ["localhost"], usage: "server" });
  await volume.write({
    "tls.crt": newServer.certPem,
    "tls.key": other.keyPem,
    "client-ca.crt": (await text(c.clientCa.cert)) + secondClientCa.certPem,
    "agent-ca.crt": await text(c.agentCa.cert),
  });
  await waitFor(
    "the bad key to be refused",
    () => /refused new TLS certificates of the client front doors/.test(proc.output()),
    20_000,
    100,
  );
  const refusal = proc
    .output()
    .split("\n")
    .find((l) => l.includes("refused new TLS certificates of the client front doors"))!;
  assert.match(refusal, /"flag":"--server-key"/);
  assert.ok(refusal.includes(volume.path("tls.key")), refusal);
  assert.match(refusal, /does not match the certificate/);
  await waitFor(
    "the failure to be counted",
    async () =>
      (await metric(
        ports.health,
        'cluster_proxy_server_certificate_reloads_total{listener="front",result="failure"}',
      )) === 1,
  );
  assert.equal(await servingSerial(ports.server, caPem, "h2"), newSerial, "the old (good) certificate stays");

  // 3. The paused transfer finishes byte-exact through the tunnel it started on.
  socket.resume();
  await done;
  assert.equal(received, TOTAL);
  assert.equal(hash.digest("hex"), patternHash(TOTAL, SEED));
  assert.doesNotMatch(agent.proc.output(), /cannot connect to proxy server|disconnected/, "the agent kept its tunnel");
  assert.equal(proc.child.exitCode, null, "the server never restarted");
});
