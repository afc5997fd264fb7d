/**
 * Throwaway certificates for tests, made with the openssl CLI into a temp directory: a CA, a
 * server certificate for `localhost`/127.0.0.1 and a client certificate. Test-only; never commit
 * key material.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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

function openssl(dir: string, args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

function issue(dir: string, name: string, cn: string, ext: string): void {
  openssl(dir, ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", `${name}.key`]);
  openssl(dir, ["req", "-new", "-key", `${name}.key`, "-subj", `/CN=${cn}`, "-out", `${name}.csr`]);
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(dir, [
    "x509",
    "-req",
    "-in",
    `${name}.csr`,
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-days",
    "2",
    "-sha256",
    "-extfile",
    `${name}.ext`,
    "-out",
    `${name}.crt`,
  ]);
}

/** Create a CA, a server certificate (localhost, 127.0.0.1, ::1) and a client certificate. */
export function createTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), "cp-client-pki-"));
  openssl(dir, ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"]);
  openssl(dir, [
    "req",
    "-x509",
    "-new",
    "-key",
    "ca.key",
    "-subj",
    "/CN=cluster-proxy test CA",
    "-days",
    "2",
    "-sha256",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
    "-out",
    "ca.crt",
  ]);
  issue(dir, "server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n");
  issue(dir, "client", "test-client", "extendedKeyUsage=clientAuth\n");
  const read = (f: string): Buffer => readFileSync(join(dir, f));
  return {
    dir,
    ca: read("ca.crt"),
    serverCert: read("server.crt"),
    serverKey: read("server.key"),
    clientCert: read("client.crt"),
    clientKey: read("client.key"),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
