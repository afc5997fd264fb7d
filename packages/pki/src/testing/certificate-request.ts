import { webcrypto } from "node:crypto";
import { x509 } from "../x509-engine.js";

/**
 * A PEM PKCS#10 request over a fresh P-256 key with common name `cn` and organizations `o`, as Go's
 * x509 (OCM's registration agent) makes them: no length bounds on the names (openssl refuses a CN
 * over 64 characters; OCM's default addon user names are longer).
 */
export async function certificateRequest(cn: string, o: string[]): Promise<string> {
  const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" };
  const keys = await webcrypto.subtle.generateKey(alg, true, ["sign", "verify"]);
  const req = await x509.Pkcs10CertificateRequestGenerator.create({
    name: [...o.map((v) => ({ O: [v] })), { CN: [cn] }],
    keys,
    signingAlgorithm: alg,
  });
  return req.toString("pem");
}
