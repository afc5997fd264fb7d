/**
 * Test-only: a throwaway standalone certificate set (@cluster-proxy/pki) in a temp directory
 * (nothing is committed), with separate trust as in production: the serving CA (`caCert`) signs
 * the server certificate (SANs localhost, 127.0.0.1, ::1) and is what clients and agents verify
 * the server with; the client CA (`clientCaCert`, the server's --server-ca-cert) signs the client
 * certificate; the agent CA (`agentCaCert`, --cluster-ca-cert) signs the agent certificate, which
 * grants the clusters {@link CLIENT_CERT_CLUSTERS} as `cluster-proxy://cluster/<name>` URI SANs
 * so fake agents may claim them. A second, unrelated CA signs a "stranger" client certificate
 * that the server must refuse everywhere.
 */
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServerOptionsInput } from "@cluster-proxy/api";
import {
  agentClusterUri,
  createCertificateAuthority,
  issueCertificate,
  writeStandaloneCerts,
  type CertificateAndKey,
  type CertKeyPaths,
} from "@cluster-proxy/pki";

/** Clusters the test agent certificate grants to an agent presenting it. */
export const CLIENT_CERT_CLUSTERS = ["east", "west", "north", "south"] as const;

export interface TestPki {
  dir: string;
  /** The serving CA: clients and agents verify the server with it. */
  caCert: string;
  /** The client CA: the server's --server-ca-cert. */
  clientCaCert: string;
  /** The agent CA: the server's --cluster-ca-cert. */
  agentCaCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  agentCert: string;
  agentKey: string;
  strangerCert: string;
  strangerKey: string;
  /** File contents, for TLS options. */
  read(path: string): Buffer;
  cleanup(): void;
}

async function writePair(paths: CertKeyPaths, pem: CertificateAndKey): Promise<void> {
  await writeFile(paths.cert, pem.certPem);
  await writeFile(paths.key, pem.keyPem, { mode: 0o600 });
}

/** Create a fresh PKI in a new temp directory. Call `cleanup()` when done. */
export async function createTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), "cp-test-pki-"));
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const paths = await writeStandaloneCerts(dir, { clusters: [], validityDays: 2 });
    const agentCa = {
      certPem: await readFile(paths.agentCa.cert, "utf8"),
      keyPem: await readFile(paths.agentCa.key, "utf8"),
    };
    const agent = { cert: join(dir, "agent-test.crt"), key: join(dir, "agent-test.key") };
    const uris = CLIENT_CERT_CLUSTERS.map(agentClusterUri);
    await writePair(
      agent,
      await issueCertificate(agentCa, { commonName: "agent", uris, usage: "client", validityDays: 2 }),
    );
    const strangerCa = await createCertificateAuthority({ commonName: "stranger-ca", validityDays: 2 });
    const stranger = { cert: join(dir, "stranger.crt"), key: join(dir, "stranger.key") };
    await writePair(
      stranger,
      await issueCertificate(strangerCa, { commonName: "stranger", usage: "client", validityDays: 2 }),
    );
    return {
      dir,
      caCert: paths.ca.cert,
      clientCaCert: paths.clientCa.cert,
      agentCaCert: paths.agentCa.cert,
      serverCert: paths.server.cert,
      serverKey: paths.server.key,
      clientCert: paths.client.cert,
      clientKey: paths.client.key,
      agentCert: agent.cert,
      agentKey: agent.key,
      strangerCert: stranger.cert,
      strangerKey: stranger.key,
      read: (path) => readFileSync(path),
      cleanup,
    };
  } catch (err) {
    cleanup();
    throw err;
  }
}

/** Server options for in-process tests: loopback, free ports, the test PKI's split trust. */
export function testServerOptions(pki: TestPki, overrides: Partial<ServerOptionsInput> = {}): ServerOptionsInput {
  return {
    mode: "both",
    serverPort: 0,
    serverBindAddress: "127.0.0.1",
    httpConnectPort: 0,
    httpConnectBindAddress: "",
    httpConnectPlain: false,
    udsName: "",
    httpConnectUdsName: "",
    deleteExistingUdsFile: true,
    agentPort: 0,
    agentBindAddress: "127.0.0.1",
    healthPort: 0,
    healthBindAddress: "127.0.0.1",
    adminPort: 0,
    adminBindAddress: "127.0.0.1",
    serverCert: pki.serverCert,
    serverKey: pki.serverKey,
    serverCaCert: pki.clientCaCert,
    clusterCert: pki.serverCert,
    clusterKey: pki.serverKey,
    clusterCaCert: pki.agentCaCert,
    proxyStrategies: ["destHost"],
    serverCount: 3,
    serverId: "server-under-test",
    keepaliveTime: 0,
    frontendKeepaliveTime: 0,
    backendDialTimeout: 30_000,
    connectionStallTimeout: 60_000,
    gracefulShutdownTimeout: 0,
    logLevel: "silent",
    ...overrides,
  };
}
