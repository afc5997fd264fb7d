/**
 * The certificate set of a standalone deployment (no Kubernetes, no addon manager) in one directory:
 * three CAs, one per trust decision, their leaves, and the migration of an old single-CA directory.
 * Design: docs/design/decisions.md#standalone-certificates-three-cas-one-per-trust-decision
 */
import { X509Certificate, createPrivateKey } from "node:crypto";
import { chmod, mkdir, readFile, readdir, rename, stat, writeFile } from "node:fs/promises";
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
import { errorMessage } from "@cluster-proxy/errors";

/** DNS names and IPs the hub is reached at when none are given. */
export const DEFAULT_HUB_HOSTS: readonly string[] = ["localhost", "127.0.0.1", "::1"];

/** Extended key usage OIDs. */
const SERVER_AUTH = "1.3.6.1.5.5.7.3.1";
const CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";

/** Options of {@link writeStandaloneCerts} and {@link ensureStandaloneCerts}. */
export interface StandaloneCertOptions {
  /** DNS names and IP addresses the hub is reached at (default {@link DEFAULT_HUB_HOSTS}). */
  hubHosts?: readonly string[];
  /** Managed clusters to issue agent certificates for. */
  clusters: readonly string[];
  /** Replace existing CAs (and so every certificate) instead of refusing. */
  force?: boolean;
  /** Key algorithm of every key (default `ECDSA-P256`). */
  keyAlgorithm?: KeyAlgorithm;
  /** Validity of the leaf certificates in days (default 365; the CAs get 10 years). */
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
  /** The serving CA (`ca.crt`): signs only the hub's serving certificate; clients and agents verify the hub with it. */
  ca: CertKeyPaths;
  /** The client CA (`client-ca.crt`): signs client certificates only; the server's `--server-ca-cert`. */
  clientCa: CertKeyPaths;
  /** The agent CA (`agent-ca.crt`): signs agent certificates only; the server's `--cluster-ca-cert`. */
  agentCa: CertKeyPaths;
  /** The hub's serving certificate (serverAuth only), for both server ports. */
  server: CertKeyPaths;
  /** A hub-side client certificate (clientAuth only). */
  client: CertKeyPaths;
  /** Agent certificates by cluster name, in the order the clusters were given. */
  agents: ReadonlyMap<string, CertKeyPaths>;
}

/** Result of {@link ensureStandaloneCerts}. */
export interface EnsuredCerts {
  paths: StandaloneCertPaths;
  /** Files written by this call (empty when everything was reused). */
  written: string[];
  /**
   * True when the directory held the single-CA layout of older releases and was split: `ca.crt`
   * kept as the serving CA, client and agent CAs created, every leaf re-issued from its role's CA.
   */
  migrated: boolean;
}

/**
 * `dir` holds the single-CA layout of older releases (one `ca.crt` signing server, client and
 * agent certificates), which {@link writeStandaloneCerts} does not overwrite;
 * {@link ensureStandaloneCerts} migrates it.
 */
export class SingleCaLayoutError extends CertificateError {
  constructor(readonly dir: string) {
    super(
      `${dir} holds the single-CA layout of an older cluster-proxy: its ca.crt signs the server, client and agent certificates alike, so an agent certificate is accepted at the client front doors`,
    );
    this.name = "SingleCaLayoutError";
  }
}

function pair(dir: string, base: string): CertKeyPaths {
  return { cert: join(dir, `${base}.crt`), key: join(dir, `${base}.key`) };
}

/** The paths of a standalone certificate set in `dir` (nothing is read or written). */
export function standaloneCertPaths(dir: string, clusters: readonly string[]): StandaloneCertPaths {
  const agents = new Map<string, CertKeyPaths>();
  for (const cluster of clusters) {
    assertClusterName(cluster);
    if (cluster === "ca")
      throw new CertificateError(
        'cluster name "ca" cannot be used in a standalone certificate directory: agent-ca.crt is the agent CA',
      );
    agents.set(cluster, pair(dir, `agent-${cluster}`));
  }
  return {
    dir,
    ca: pair(dir, "ca"),
    clientCa: pair(dir, "client-ca"),
    agentCa: pair(dir, "agent-ca"),
    server: pair(dir, "server"),
    client: pair(dir, "client"),
    agents,
  };
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

async function anyExists(paths: CertKeyPaths): Promise<boolean> {
  return (await exists(paths.cert)) || (await exists(paths.key));
}

/**
 * True when `dir` holds the single-CA layout of older releases: a `ca.crt` but neither a client
 * nor an agent CA.
 */
export async function isSingleCaLayout(dir: string): Promise<boolean> {
  const paths = standaloneCertPaths(dir, []);
  return (await exists(paths.ca.cert)) && !(await anyExists(paths.clientCa)) && !(await anyExists(paths.agentCa));
}

/**
 * What an existing directory already holds: the clusters of its `agent-<cluster>.crt` files and
 * the DNS names and IPs of its `server.crt` (undefined when there is none or it is unreadable).
 * Lets a re-run keep what was issued before.
 */
export async function existingStandaloneCerts(
  dir: string,
): Promise<{ clusters: string[]; hubHosts: string[] | undefined }> {
  let names: string[] = [];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const clusters: string[] = [];
  for (const name of names.sort()) {
    const m = /^agent-(.+)\.crt$/.exec(name);
    if (!m || m[1] === "ca") continue;
    try {
      assertClusterName(m[1]!);
      clusters.push(m[1]!);
    } catch {
      /* not one of ours */
    }
  }
  let hubHosts: string[] | undefined;
  try {
    const server = new X509Certificate(await readFile(join(dir, "server.crt")));
    hubHosts = (server.subjectAltName ?? "")
      .split(", ")
      .map((san) => /^(DNS|IP Address):(.+)$/.exec(san))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => m[2]!);
    if (hubHosts.length === 0) hubHosts = undefined;
  } catch {
    hubHosts = undefined;
  }
  return { clusters, hubHosts };
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

/** The three CAs of a set. */
interface Authorities {
  serving: CertificateAndKey;
  client: CertificateAndKey;
  agent: CertificateAndKey;
}

interface Issuer {
  cas: Authorities;
  options: StandaloneCertOptions;
  hosts: { dnsNames: string[]; ipAddresses: string[] };
}

const CA_NAMES = {
  serving: "cluster-proxy-serving-ca",
  client: "cluster-proxy-client-ca",
  agent: "cluster-proxy-agent-ca",
} as const;

function createCa(role: keyof typeof CA_NAMES, options: StandaloneCertOptions): Promise<CertificateAndKey> {
  return createCertificateAuthority({ commonName: CA_NAMES[role], keyAlgorithm: options.keyAlgorithm });
}

function issueServer(issuer: Issuer): Promise<CertificateAndKey> {
  return issueCertificate(issuer.cas.serving, {
    commonName: "cluster-proxy-server",
    ...issuer.hosts,
    usage: "server",
    validityDays: issuer.options.validityDays,
    keyAlgorithm: issuer.options.keyAlgorithm,
  });
}

function issueClient(issuer: Issuer): Promise<CertificateAndKey> {
  return issueCertificate(issuer.cas.client, {
    commonName: "cluster-proxy-client",
    usage: "client",
    validityDays: issuer.options.validityDays,
    keyAlgorithm: issuer.options.keyAlgorithm,
  });
}

function issueAgent(issuer: Issuer, cluster: string): Promise<CertificateAndKey> {
  return issueCertificate(issuer.cas.agent, {
    commonName: `cluster-proxy-agent:${cluster}`.slice(0, 64),
    organization: "cluster-proxy-agents",
    uris: [agentClusterUri(cluster)],
    // clientAuth towards the proxy-servers, serverAuth for the agent's gateway endpoint.
    usage: "both",
    validityDays: issuer.options.validityDays,
    keyAlgorithm: issuer.options.keyAlgorithm,
  });
}

/**
 * Create three fresh CAs and every certificate of a standalone deployment in `dir` (created if
 * missing). Refuses, naming the file, when `dir` already holds a CA, unless `force` is set; a
 * directory of the old single-CA layout is refused with a {@link SingleCaLayoutError}.
 */
export async function writeStandaloneCerts(dir: string, options: StandaloneCertOptions): Promise<StandaloneCertPaths> {
  const paths = standaloneCertPaths(dir, options.clusters);
  const hosts = splitHubHosts(options.hubHosts ?? DEFAULT_HUB_HOSTS);
  if (!options.force) {
    if (await isSingleCaLayout(dir)) throw new SingleCaLayoutError(dir);
    for (const file of [paths.ca, paths.clientCa, paths.agentCa].flatMap((p) => [p.cert, p.key])) {
      if (await exists(file))
        throw new CertificateError(
          `${file} already exists: refusing to replace the CA (every certificate it issued would stop working); use force to replace it`,
        );
    }
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const cas: Authorities = {
    serving: await createCa("serving", options),
    client: await createCa("client", options),
    agent: await createCa("agent", options),
  };
  const issuer: Issuer = { cas, options, hosts };
  const written: string[] = [];
  await writePair(paths.ca, cas.serving, written);
  await writePair(paths.clientCa, cas.client, written);
  await writePair(paths.agentCa, cas.agent, written);
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

/** True when the certificate's extended key usage is exactly `oid`. */
function onlyUsage(cert: X509Certificate, oid: string): boolean {
  return exactUsages(cert, [oid]);
}

/** True when the certificate's extended key usages are exactly `oids` (in any order). */
function exactUsages(cert: X509Certificate, oids: readonly string[]): boolean {
  const usages = cert.keyUsage ?? [];
  return usages.length === oids.length && oids.every((oid) => usages.includes(oid));
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
 * An existing CA of `dir`: undefined when both files are missing; refused when only one is there
 * or the pair is unusable.
 */
async function loadCa(
  dir: string,
  paths: CertKeyPaths,
): Promise<{ pem: CertificateAndKey; cert: X509Certificate } | undefined> {
  const pem = await readPair(paths);
  if (!pem) {
    if (await anyExists(paths))
      throw new CertificateError(
        `${dir} holds only one of ${paths.cert} and ${paths.key}: refusing to replace the CA; remove the directory or use force`,
      );
    return undefined;
  }
  try {
    const cert = new X509Certificate(pem.certPem);
    if (!cert.ca) throw new Error("not a CA certificate");
    if (!cert.checkPrivateKey(createPrivateKey(pem.keyPem))) throw new Error(`${paths.key} does not match it`);
    return { pem, cert };
  } catch (err) {
    throw new CertificateError(`${paths.cert}: unusable CA (${errorMessage(err)}); use force to replace it`, {
      cause: err,
    });
  }
}

function publicKeyDer(cert: X509Certificate): string {
  return cert.publicKey.export({ type: "spki", format: "der" }).toString("base64");
}

/**
 * Make `dir` hold a complete standalone certificate set, reusing what is there: existing CAs are
 * kept (a CA is created only when both of its files are missing, or with `force`), and each leaf
 * is kept when it was issued by the CA of its role, matches its key, is valid for at least
 * another day, has exactly its role's extended key usage and still fits (the server certificate
 * covers every hub host; an agent certificate grants its cluster). Anything else is (re)issued.
 * A directory of the old single-CA layout is migrated (see the module comment).
 */
export async function ensureStandaloneCerts(dir: string, options: StandaloneCertOptions): Promise<EnsuredCerts> {
  const paths = standaloneCertPaths(dir, options.clusters);
  const hosts = splitHubHosts(options.hubHosts ?? DEFAULT_HUB_HOSTS);
  const fresh = async (): Promise<EnsuredCerts> => ({
    paths: await writeStandaloneCerts(dir, { ...options, force: true }),
    written: allFiles(paths),
    migrated: false,
  });
  if (options.force) return fresh();
  const migrated = await isSingleCaLayout(dir);
  const serving = await loadCa(dir, paths.ca);
  const clientCa = await loadCa(dir, paths.clientCa);
  const agentCa = await loadCa(dir, paths.agentCa);
  if (!serving) {
    if (clientCa || agentCa)
      throw new CertificateError(
        `${dir} holds a client or agent CA but no ${paths.ca.cert}: refusing to replace the CAs; remove the directory or use force`,
      );
    return fresh();
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const written: string[] = [];
  const created = async (role: "client" | "agent", where: CertKeyPaths) => {
    const pem = await createCa(role, options);
    await writePair(where, pem, written);
    return { pem, cert: new X509Certificate(pem.certPem) };
  };
  const client = clientCa ?? (await created("client", paths.clientCa));
  const agent = agentCa ?? (await created("agent", paths.agentCa));
  const roots = [
    { file: paths.ca.cert, key: publicKeyDer(serving.cert) },
    { file: paths.clientCa.cert, key: publicKeyDer(client.cert) },
    { file: paths.agentCa.cert, key: publicKeyDer(agent.cert) },
  ];
  for (let i = 0; i < roots.length; i++)
    for (let j = i + 1; j < roots.length; j++)
      if (roots[i]!.key === roots[j]!.key)
        throw new CertificateError(
          `${roots[i]!.file} and ${roots[j]!.file} have the same key: the serving, client and agent CAs must be distinct (an agent certificate would be accepted at the client front doors); remove one of them to have it re-created, or use force`,
        );

  const issuer: Issuer = { cas: { serving: serving.pem, client: client.pem, agent: agent.pem }, options, hosts };
  const serverFits = (cert: X509Certificate): boolean =>
    onlyUsage(cert, SERVER_AUTH) &&
    hosts.dnsNames.every((h) => cert.checkHost(h, { wildcards: false }) !== undefined) &&
    hosts.ipAddresses.every((ip) => cert.checkIP(ip) !== undefined);
  if (!reusable(await readPair(paths.server), serving.cert, serverFits))
    await writePair(paths.server, await issueServer(issuer), written);
  if (!reusable(await readPair(paths.client), client.cert, (cert) => onlyUsage(cert, CLIENT_AUTH)))
    await writePair(paths.client, await issueClient(issuer), written);
  for (const [cluster, agentPaths] of paths.agents) {
    // A clientAuth-only agent certificate (from before the gateway) is stale: re-issued.
    const fits = (cert: X509Certificate): boolean =>
      exactUsages(cert, [SERVER_AUTH, CLIENT_AUTH]) && clusterNamesFromCertificate(cert).includes(cluster);
    if (!reusable(await readPair(agentPaths), agent.cert, fits))
      await writePair(agentPaths, await issueAgent(issuer, cluster), written);
  }
  return { paths, written, migrated };
}

function allFiles(paths: StandaloneCertPaths): string[] {
  return [paths.ca, paths.clientCa, paths.agentCa, paths.server, paths.client, ...paths.agents.values()].flatMap(
    (p) => [p.cert, p.key],
  );
}
