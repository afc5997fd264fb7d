/**
 * Test-only: a throwaway standalone certificate set in a temp directory (no key material committed),
 * with the production split of trust, plus a "stranger" client certificate every server must refuse.
 * Behaviour: docs/testing/framework.md#createtestpki-cluster-proxypki-testing
 */
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agentClusterUri } from "../agent-identity.js";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "../certificates.js";
import { writeStandaloneCerts, type CertKeyPaths } from "../standalone-certs.js";

/** Clusters the test agent certificate grants to an agent presenting it. */
export const TEST_AGENT_CLUSTERS = ["east", "west", "north", "south"] as const;

/** Where the files of a {@link TestPki} are (for options that take a path, like --ca-cert). */
export interface TestPkiPaths {
  ca: CertKeyPaths;
  clientCa: CertKeyPaths;
  agentCa: CertKeyPaths;
  server: CertKeyPaths;
  client: CertKeyPaths;
  agent: CertKeyPaths;
  stranger: CertKeyPaths;
}

/** A generated test PKI: its files, their PEM contents (for TLS options), and its cleanup. */
export interface TestPki {
  dir: string;
  paths: TestPkiPaths;
  /** The serving CA: what clients and agents verify the hub with. */
  ca: Buffer;
  /** The client CA: what a hub's front doors trust. */
  clientCa: Buffer;
  /** The agent CA: what a hub's agent port trusts. */
  agentCa: Buffer;
  serverCert: Buffer;
  serverKey: Buffer;
  clientCert: Buffer;
  clientKey: Buffer;
  agentCert: Buffer;
  agentKey: Buffer;
  strangerCert: Buffer;
  strangerKey: Buffer;
  /** Delete the directory. */
  cleanup(): void;
}

const VALIDITY_DAYS = 2;

async function writePair(paths: CertKeyPaths, pem: CertificateAndKey): Promise<void> {
  await writeFile(paths.cert, pem.certPem);
  await writeFile(paths.key, pem.keyPem, { mode: 0o600 });
}

/** Create a fresh PKI in a new temp directory. Call `cleanup()` when done. */
export async function createTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), "cp-test-pki-"));
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const standalone = await writeStandaloneCerts(dir, { clusters: [], validityDays: VALIDITY_DAYS });
    const agentCa = {
      certPem: await readFile(standalone.agentCa.cert, "utf8"),
      keyPem: await readFile(standalone.agentCa.key, "utf8"),
    };
    const agent = { cert: join(dir, "agent-test.crt"), key: join(dir, "agent-test.key") };
    const uris = TEST_AGENT_CLUSTERS.map(agentClusterUri);
    await writePair(
      agent,
      await issueCertificate(agentCa, { commonName: "agent", uris, usage: "both", validityDays: VALIDITY_DAYS }),
    );
    const strangerCa = await createCertificateAuthority({ commonName: "stranger-ca", validityDays: VALIDITY_DAYS });
    const stranger = { cert: join(dir, "stranger.crt"), key: join(dir, "stranger.key") };
    await writePair(
      stranger,
      await issueCertificate(strangerCa, { commonName: "stranger", usage: "client", validityDays: VALIDITY_DAYS }),
    );
    const { ca, clientCa, server, client } = standalone;
    const paths: TestPkiPaths = { ca, clientCa, agentCa: standalone.agentCa, server, client, agent, stranger };
    return {
      dir,
      paths,
      ca: readFileSync(paths.ca.cert),
      clientCa: readFileSync(paths.clientCa.cert),
      agentCa: readFileSync(paths.agentCa.cert),
      serverCert: readFileSync(paths.server.cert),
      serverKey: readFileSync(paths.server.key),
      clientCert: readFileSync(paths.client.cert),
      clientKey: readFileSync(paths.client.key),
      agentCert: readFileSync(agent.cert),
      agentKey: readFileSync(agent.key),
      strangerCert: readFileSync(stranger.cert),
      strangerKey: readFileSync(stranger.key),
      cleanup,
    };
  } catch (err) {
    cleanup();
    throw err;
  }
}
