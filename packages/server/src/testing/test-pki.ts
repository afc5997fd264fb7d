/**
 * Test-only: throwaway certificates made with the openssl CLI in a temp directory (nothing is
 * committed). One CA signs a server certificate (SANs localhost, 127.0.0.1, ::1) and a client
 * certificate usable by agents and clients (it grants the clusters {@link CLIENT_CERT_CLUSTERS}
 * as `cluster-proxy://cluster/<name>` URI SANs, so fake agents may claim them); a second, unrelated CA signs a "stranger" client
 * certificate that the server must refuse.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Clusters the test client certificate grants to an agent presenting it. */
export const CLIENT_CERT_CLUSTERS = ["east", "west", "north", "south"] as const;

export interface TestPki {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  strangerCert: string;
  strangerKey: string;
  /** File contents, for TLS options. */
  read(path: string): Buffer;
  cleanup(): void;
}

function openssl(dir: string, args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

const EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

function makeCa(dir: string, name: string): void {
  openssl(dir, [
    "req",
    "-x509",
    ...EC,
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.crt`,
    "-days",
    "2",
    "-subj",
    `/CN=${name}`,
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ]);
}

function makeLeaf(dir: string, ca: string, name: string, ext: string): void {
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(dir, ["req", ...EC, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`]);
  openssl(dir, [
    "x509",
    "-req",
    "-in",
    `${name}.csr`,
    "-CA",
    `${ca}.crt`,
    "-CAkey",
    `${ca}.key`,
    "-CAcreateserial",
    "-out",
    `${name}.crt`,
    "-days",
    "2",
    "-extfile",
    `${name}.ext`,
  ]);
}

/** Create a fresh PKI in a new temp directory. Call `cleanup()` when done. */
export function createTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), "cp-test-pki-"));
  makeCa(dir, "ca");
  makeCa(dir, "stranger-ca");
  makeLeaf(
    dir,
    "ca",
    "server",
    "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
  );
  const uris = CLIENT_CERT_CLUSTERS.map((c) => `URI:cluster-proxy://cluster/${c}`).join(",");
  makeLeaf(dir, "ca", "client", `subjectAltName=${uris}\nextendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n`);
  makeLeaf(dir, "stranger-ca", "stranger", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n");
  const p = (f: string): string => join(dir, f);
  return {
    dir,
    caCert: p("ca.crt"),
    serverCert: p("server.crt"),
    serverKey: p("server.key"),
    clientCert: p("client.crt"),
    clientKey: p("client.key"),
    strangerCert: p("stranger.crt"),
    strangerKey: p("stranger.key"),
    read: (path) => readFileSync(path),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
