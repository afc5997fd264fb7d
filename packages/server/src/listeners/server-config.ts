/**
 * What the server needs of its options beyond the schema: the schema, its cross-field rules and
 * the front-door plan live in @cluster-proxy/api; this module keeps the checks of the
 * certificates' contents.
 */
import { X509Certificate } from "node:crypto";

/** The certificates of a PEM bundle (unreadable blocks are skipped: the TLS layer reports those). */
function pemCertificates(pem: Buffer | string): X509Certificate[] {
  const out: X509Certificate[] = [];
  for (const block of pem.toString().match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? []) {
    try {
      out.push(new X509Certificate(block));
    } catch {
      /* not a certificate */
    }
  }
  return out;
}

/**
 * Subjects of the CA certificates that both --server-ca-cert and --cluster-ca-cert trust. Any is
 * shared trust: a certificate issued for an agent (its key lives in a managed cluster) is then
 * accepted at the client front doors, and a client's at the agent port.
 */
export function sharedCaSubjects(serverCa: Buffer | string, clusterCa: Buffer | string): string[] {
  const agentSide = new Set(pemCertificates(clusterCa).map((c) => c.fingerprint256));
  return pemCertificates(serverCa)
    .filter((c) => agentSide.has(c.fingerprint256))
    .map((c) => c.subject.replace(/\n/g, ", "));
}
