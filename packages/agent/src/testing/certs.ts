/**
 * Test-only: a throwaway standalone certificate set (@cluster-proxy/pki) in a temp directory (no
 * key material is committed): the serving CA and a server certificate for localhost/127.0.0.1/::1
 * it signed, and the agent CA and an agent client certificate granting the cluster `east`.
 */
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeStandaloneCerts } from "@cluster-proxy/pki";

/** Paths and contents of a generated test PKI. */
export interface TestPki {
  dir: string;
  /** The serving CA: what the agent verifies the server with (--ca-cert). */
  caCertPath: string;
  /** The agent CA: what a server's agent port trusts. */
  agentCaCertPath: string;
  serverCertPath: string;
  serverKeyPath: string;
  agentCertPath: string;
  agentKeyPath: string;
  ca: Buffer;
  agentCa: Buffer;
  serverCert: Buffer;
  serverKey: Buffer;
  agentCert: Buffer;
  agentKey: Buffer;
  /** Delete the directory. */
  cleanup(): void;
}

/** Generate the CAs, a server certificate (localhost, 127.0.0.1, ::1) and an agent client certificate. */
export async function generateTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), "cp-agent-pki-"));
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const paths = await writeStandaloneCerts(dir, { clusters: ["east"], validityDays: 1 });
    const agent = paths.agents.get("east")!;
    return {
      dir,
      caCertPath: paths.ca.cert,
      agentCaCertPath: paths.agentCa.cert,
      serverCertPath: paths.server.cert,
      serverKeyPath: paths.server.key,
      agentCertPath: agent.cert,
      agentKeyPath: agent.key,
      ca: readFileSync(paths.ca.cert),
      agentCa: readFileSync(paths.agentCa.cert),
      serverCert: readFileSync(paths.server.cert),
      serverKey: readFileSync(paths.server.key),
      agentCert: readFileSync(agent.cert),
      agentKey: readFileSync(agent.key),
      cleanup,
    };
  } catch (err) {
    cleanup();
    throw err;
  }
}
