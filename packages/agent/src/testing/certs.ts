/**
 * Test-only: throwaway certificates generated with openssl into a temp directory (no key
 * material is committed). A CA, a server certificate for localhost/127.0.0.1 and an agent
 * client certificate, all valid for one day.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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

function openssl(dir: string, args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

function leaf(dir: string, name: string, subject: string, ext: string): void {
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(dir, [
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.csr`,
    "-subj",
    subject,
  ]);
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
    "1",
    "-out",
    `${name}.crt`,
    "-extfile",
    `${name}.ext`,
  ]);
}

/** Generate a CA, a server certificate (localhost, 127.0.0.1) and an agent client certificate. */
export function generateTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), "cp-agent-pki-"));
  try {
    openssl(dir, [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      "ca.key",
      "-out",
      "ca.crt",
      "-days",
      "1",
      "-subj",
      "/CN=cluster-proxy-test-ca",
      "-addext",
      "basicConstraints=critical,CA:TRUE",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    leaf(
      dir,
      "server",
      "/CN=localhost",
      "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
    );
    leaf(dir, "agent", "/CN=test-agent", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n");
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const path = (f: string): string => join(dir, f);
  return {
    dir,
    caCertPath: path("ca.crt"),
    serverCertPath: path("server.crt"),
    serverKeyPath: path("server.key"),
    agentCertPath: path("agent.crt"),
    agentKeyPath: path("agent.key"),
    ca: readFileSync(path("ca.crt")),
    serverCert: readFileSync(path("server.crt")),
    serverKey: readFileSync(path("server.key")),
    agentCert: readFileSync(path("agent.crt")),
    agentKey: readFileSync(path("agent.key")),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
