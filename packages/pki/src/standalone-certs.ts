/**
 * The certificate set of a standalone deployment (no Kubernetes, no addon manager), written to
 * one directory:
 *
 * | File | What it is |
 * | --- | --- |
 * | `ca.crt`, `ca.key` | the CA every other certificate chains to; both server ports and agents trust it |
 * | `server.crt`, `server.key` | the hub's serving certificate, SANs = the hub hosts; usage server+client, so the same pair serves the client front doors (`--server-cert`) and the agent port (`--cluster-cert`) |
 * | `client.crt`, `client.key` | a client certificate for hub-side clients (SDK, `curl --proxy-cert`) |
 * | `agent-<cluster>.crt`, `.key` | one client certificate per managed cluster, granting exactly that cluster (see agent-identity) |
 *
 * Keys are written with mode 0600.
 */
import { X509Certificate, createPrivateKey } from "node:crypto";
import { chmod, mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { isIP } from "node:net";
import { join } from "node:path";
import { agentClusterUri, assertClusterName, clusterNamesFromCertificate } from "./agent-identity.js";
import {
  CertificateError,
  createCertificateAuthority,
  issueCertificate,
  type CertificateAndKey,
  type KeyAlgorithm,
} from "./certificates.js";

/** DNS names and IPs the hub is reached at when none are given. */
export const DEFAULT_HUB_HOSTS: readonly string[] = ["localhost", "127.0.0.1", "::1"];

/** Options of {@link writeStandaloneCerts} and {@link ensureStandaloneCerts}. */
export interface StandaloneCertOptions {
  /** DNS names and IP addresses the hub is reached at (default {@link DEFAULT_HUB_HOSTS}). */
  hubHosts?: readonly string[];
  /** Managed clusters to issue agent certificates for. */
  clusters: readonly string[];
  /** Replace an existing CA (and so every certificate) instead of refusing. */
  force?: boolean;
  /** Key algorithm of every key (default `ECDSA-P256`). */
  keyAlgorithm?: KeyAlgorithm;
  /** Validity of the leaf certificates in days (default 365; the CA gets 10 years). */
  validityDays?: number;
}

/** A certificate file and its key file. */
export interface CertKeyPaths {
  cert: string;
  key: string;
}

/** Where each file of a standalone certificate set is. */
export interface StandaloneCertPaths {
  dir: string;
  ca: CertKeyPaths;
  server: CertKeyPaths;
  client: CertKeyPaths;
  /** Agent certificates by cluster name, in the order the clusters were given. */
  agents: ReadonlyMap<string, CertKeyPaths>;
}

/** Result of {@link ensureStandaloneCerts}. */
export interface EnsuredCerts {
  paths: StandaloneCertPaths;
  /** Files written by this call (empty when everything was reused). */
  written: string[];
}

function pair(dir: string, base: string): CertKeyPaths {
  return { cert: join(dir, `${base}.crt`), key: join(dir, `${base}.key`) };
}

/** The paths of a standalone certificate set in `dir` (nothing is read or written). */
export function standaloneCertPaths(dir: string, clusters: readonly string[]): StandaloneCertPaths {
  const agents = new Map<string, CertKeyPaths>();
  for (const cluster of clusters) {
    assertClusterName(cluster);
    agents.set(cluster, pair(dir, `agent-${cluster}`));
  }
  return { dir, ca: pair(dir, "ca"), server: pair(dir, "server"), client: pair(dir, "client"), agents };
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw err;
  }
}

/** Write via a temporary file and rename, so a reader never sees half a key. */
async function writeFileAtomic(path: string, data: string, mode: number): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, data, { mode });
  await chmod(tmp, mode);
  await rename(tmp, path);
}

async function writePair(paths: CertKeyPaths, pem: CertificateAndKey, written: string[]): Promise<void> {
  await writeFileAtomic(paths.key, pem.keyPem, 0o600);
  await writeFileAtomic(paths.cert, pem.certPem, 0o644);
  written.push(paths.cert, paths.key);
}

function splitHubHosts(hubHosts: readonly string[]): { dnsNames: string[]; ipAddresses: string[] } {
  const dnsNames: string[] = [];
  const ipAddresses: string[] = [];
  for (const raw of hubHosts) {
    const host = raw.trim().replace(/^\[(.*)\]$/, "$1");
    if (host === "") continue;
    if (isIP(host) !== 0) ipAddresses.push(host);
    else dnsNames.push(host);
  }
  if (dnsNames.length + ipAddresses.length === 0) throw new CertificateError("hubHosts: give at least one host");
  return { dnsNames, ipAddresses };
}

interface Issuer {
  ca: CertificateAndKey;
  options: StandaloneCertOptions;
  hosts: { dnsNames: string[]; ipAddresses: string[] };
}

function issueServer(issuer: Issuer): Promise<CertificateAndKey> {
  return issueCertificate(issuer.ca, {
    commonName: "cluster-proxy-server",
    ...issuer.hosts,
    usage: "both",
    validityDays: issuer.options.validityDays,
    keyAlgorithm: issuer.options.keyAlgorithm,
  });
}

function issueClient(issuer: Issuer): Promise<CertificateAndKey> {
  return issueCertificate(issuer.ca, {
    commonName: "cluster-proxy-client",
    usage: "client",
    validityDays: issuer.options.validityDays,
    keyAlgorithm: issuer.options.keyAlgorithm,
  });
}

function issueAgent(issuer: Issuer, cluster: string): Promise<CertificateAndKey> {
  return issueCertificate(issuer.ca, {
    commonName: `cluster-proxy-agent:${cluster}`.slice(0, 64),
    organization: "cluster-proxy-agents",
    uris: [agentClusterUri(cluster)],
    usage: "client",
    validityDays: issuer.options.validityDays,
    keyAlgorithm: issuer.options.keyAlgorithm,
  });
}

/**
 * Create a fresh CA and every certificate of a standalone deployment in `dir` (created if
 * missing). Refuses, naming the file, when `dir` already holds a CA, unless `force` is set.
 */
export async function writeStandaloneCerts(dir: string, options: StandaloneCertOptions): Promise<StandaloneCertPaths> {
  const paths = standaloneCertPaths(dir, options.clusters);
  const hosts = splitHubHosts(options.hubHosts ?? DEFAULT_HUB_HOSTS);
  if (!options.force) {
    for (const file of [paths.ca.cert, paths.ca.key]) {
      if (await exists(file))
        throw new CertificateError(
          `${file} already exists: refusing to replace the CA (every certificate it issued would stop working); use force to replace it`,
        );
    }
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const ca = await createCertificateAuthority({ commonName: "cluster-proxy-ca", keyAlgorithm: options.keyAlgorithm });
  const issuer: Issuer = { ca, options, hosts };
  const written: string[] = [];
  await writePair(paths.ca, ca, written);
  await writePair(paths.server, await issueServer(issuer), written);
  await writePair(paths.client, await issueClient(issuer), written);
  for (const [cluster, agentPaths] of paths.agents)
    await writePair(agentPaths, await issueAgent(issuer, cluster), written);
  return paths;
}

async function readPair(paths: CertKeyPaths): Promise<CertificateAndKey | undefined> {
  if (!(await exists(paths.cert)) || !(await exists(paths.key))) return undefined;
  return { certPem: await readFile(paths.cert, "utf8"), keyPem: await readFile(paths.key, "utf8") };
}

/** True when `pem` is a certificate issued by `ca` with its own key, valid now, for which `fits` holds. */
function reusable(
  pem: CertificateAndKey | undefined,
  ca: X509Certificate,
  fits: (cert: X509Certificate) => boolean,
): boolean {
  if (!pem) return false;
  try {
    const cert = new X509Certificate(pem.certPem);
    const now = Date.now();
    return (
      cert.checkIssued(ca) &&
      cert.verify(ca.publicKey) &&
      cert.checkPrivateKey(createPrivateKey(pem.keyPem)) &&
      Date.parse(cert.validFrom) <= now &&
      now < Date.parse(cert.validTo) - 86_400_000 &&
      fits(cert)
    );
  } catch {
    return false;
  }
}

/**
 * Make `dir` hold a complete standalone certificate set, reusing what is there: an existing CA
 * is kept (a new one is created only when `ca.crt`/`ca.key` are missing, or with `force`), and
 * each leaf is kept when it was issued by that CA, matches its key, is valid for at least
 * another day and still fits (the server certificate covers every hub host; an agent
 * certificate grants its cluster). Anything else is (re)issued.
 */
export async function ensureStandaloneCerts(dir: string, options: StandaloneCertOptions): Promise<EnsuredCerts> {
  const paths = standaloneCertPaths(dir, options.clusters);
  const hubHosts = options.hubHosts ?? DEFAULT_HUB_HOSTS;
  const hosts = splitHubHosts(hubHosts);
  const existingCa = options.force ? undefined : await readPair(paths.ca);
  if (!existingCa) {
    if (!options.force && ((await exists(paths.ca.cert)) || (await exists(paths.ca.key))))
      throw new CertificateError(
        `${dir} holds only one of ca.crt and ca.key: refusing to replace the CA; remove the directory or use force`,
      );
    return { paths: await writeStandaloneCerts(dir, { ...options, force: true }), written: allFiles(paths) };
  }
  let caCert: X509Certificate;
  try {
    caCert = new X509Certificate(existingCa.certPem);
    if (!caCert.checkPrivateKey(createPrivateKey(existingCa.keyPem))) throw new Error("ca.key does not match ca.crt");
  } catch (err) {
    throw new CertificateError(`${paths.ca.cert}: unusable CA (${(err as Error).message}); use force to replace it`, {
      cause: err,
    });
  }
  const issuer: Issuer = { ca: existingCa, options, hosts };
  const written: string[] = [];
  const serverFits = (cert: X509Certificate): boolean =>
    hosts.dnsNames.every((h) => cert.checkHost(h, { wildcards: false }) !== undefined) &&
    hosts.ipAddresses.every((ip) => cert.checkIP(ip) !== undefined);
  if (!reusable(await readPair(paths.server), caCert, serverFits))
    await writePair(paths.server, await issueServer(issuer), written);
  if (!reusable(await readPair(paths.client), caCert, () => true))
    await writePair(paths.client, await issueClient(issuer), written);
  for (const [cluster, agentPaths] of paths.agents) {
    const grants = (cert: X509Certificate): boolean => clusterNamesFromCertificate(cert).includes(cluster);
    if (!reusable(await readPair(agentPaths), caCert, grants))
      await writePair(agentPaths, await issueAgent(issuer, cluster), written);
  }
  return { paths, written };
}

function allFiles(paths: StandaloneCertPaths): string[] {
  return [paths.ca, paths.server, paths.client, ...paths.agents.values()].flatMap((p) => [p.cert, p.key]);
}
