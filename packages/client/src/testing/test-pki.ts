/**
 * Throwaway certificates for tests: a standalone certificate set (@cluster-proxy/pki) in a temp
 * directory: a CA, a server certificate for `localhost`/127.0.0.1/::1 and a client certificate.
 * Test-only; never commit key material.
 */
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeStandaloneCerts } from "@cluster-proxy/pki";

/** PEM material of a test PKI plus its directory (files `ca.crt`, `server.crt`, ...). */
export interface TestPki {
  dir: string;
  ca: Buffer;
  serverCert: Buffer;
  serverKey: Buffer;
  clientCert: Buffer;
  clientKey: Buffer;
  /** Remove the directory. */
  cleanup(): void;
}

/** Create a CA, a server certificate (localhost, 127.0.0.1, ::1) and a client certificate. */
export async function createTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), "cp-client-pki-"));
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const { ca, server, client } = await writeStandaloneCerts(dir, { clusters: [], validityDays: 2 });
    return {
      dir,
      ca: readFileSync(ca.cert),
      serverCert: readFileSync(server.cert),
      serverKey: readFileSync(server.key),
      clientCert: readFileSync(client.cert),
      clientKey: readFileSync(client.key),
      cleanup,
    };
  } catch (err) {
    cleanup();
    throw err;
  }
}
