/**
 * Test-only: a throwaway standalone certificate set (@cluster-proxy/pki) in a temp directory (no
 * key material is committed): a CA, a server certificate for localhost/127.0.0.1/::1 and an agent
 * client certificate granting the cluster `east`.
 */
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeStandaloneCerts } from "@cluster-proxy/pki";

/** Paths and contents of a generated test PKI. */
export interface TestPki {
  dir: string;
  caCertPath: string;
  serverCertPath: string;
  serverKeyPath: string;
  agentCertPath: string;
  agentKeyPath: string;
  ca: Buffer;
  serverCert: Buffer;
  serverKey: Buffer;
  agentCert: Buffer;
  agentKey: Buffer;
  /** Delete the directory. */
  cleanup(): void;
}

/** Generate a CA, a server certificate (localhost, 127.0.0.1, ::1) and an agent client certificate. */
export async function generateTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), "cp-agent-pki-"));
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const paths = await writeStandaloneCerts(dir, { clusters: ["east"], validityDays: 1 });
    const agent = paths.agents.get("east")!;
    return {
      dir,
      caCertPath: paths.ca.cert,
      serverCertPath: paths.server.cert,
      serverKeyPath: paths.server.key,
      agentCertPath: agent.cert,
      agentKeyPath: agent.key,
      ca: readFileSync(paths.ca.cert),
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
