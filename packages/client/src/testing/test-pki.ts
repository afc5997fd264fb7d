/**
 * Throwaway certificates for tests: a standalone certificate set (@cluster-proxy/pki) in a temp
 * directory: the serving CA (`ca`, what clients verify the hub with) and a server certificate for
 * `localhost`/127.0.0.1/::1, the client CA (`clientCa`, what a hub's front doors trust) and a
 * client certificate. Test-only; never commit key material.
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
  clientCa: Buffer;
  serverCert: Buffer;
  serverKey: Buffer;
  clientCert: Buffer;
  clientKey: Buffer;
  /** Remove the directory. */
  cleanup(): void;
}

/** Create the CAs, a server certificate (localhost, 127.0.0.1, ::1) and a client certificate. */
export async function createTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), "cp-client-pki-"));
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const { ca, clientCa, server, client } = await writeStandaloneCerts(dir, { clusters: [], validityDays: 2 });
    return {
      dir,
      ca: readFileSync(ca.cert),
      clientCa: readFileSync(clientCa.cert),
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
