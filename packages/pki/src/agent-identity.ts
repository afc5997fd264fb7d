/**
 * Per-cluster agent identity, carried in the agent's client certificate.
 *
 * Encoding: an agent certificate grants one managed cluster per URI subject alternative name
 * of the form
 *
 *     cluster-proxy://cluster/<name>
 *
 * where `<name>` is the cluster name, percent-encoded as by `encodeURIComponent` (cluster names
 * are DNS-1123 labels, so in practice they appear verbatim). A certificate may carry several
 * such SANs (one agent serving several clusters); other SANs (DNS, IP, other URIs) are ignored.
 * The proxy server reads the granted names with {@link clusterNamesFromCertificate} and refuses
 * any `agentidentifiers` host that the certificate does not grant, so holding some agent
 * certificate is not enough to receive another cluster's traffic.
 */
import { X509Certificate as NodeX509Certificate } from "node:crypto";
import { clusterNameProblem } from "@cluster-proxy/api/cluster-name";
import { CertificateError } from "./certificates.js";
import { x509 } from "./x509-engine.js";

/** Prefix of the URI SAN that grants a cluster to an agent certificate. */
export const AGENT_CLUSTER_URI_PREFIX = "cluster-proxy://cluster/";

/**
 * Check that `name` is usable as a cluster name: the one rule of `@cluster-proxy/api/cluster-name`
 * (what OCM accepts for a ManagedCluster name, a DNS-1123 label). Throws a CertificateError naming it.
 */
export function assertClusterName(name: string): void {
  const problem = clusterNameProblem(name);
  if (problem !== undefined) throw new CertificateError(problem);
}

/** The URI SAN that grants `clusterName` to an agent certificate. */
export function agentClusterUri(clusterName: string): string {
  return AGENT_CLUSTER_URI_PREFIX + encodeURIComponent(clusterName);
}

function toDer(input: string | Uint8Array | NodeX509Certificate): Uint8Array {
  if (input instanceof NodeX509Certificate) return input.raw;
  if (typeof input === "string") {
    const match = /-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/.exec(input);
    if (!match) throw new CertificateError("not a PEM certificate (no BEGIN CERTIFICATE block)");
    return Buffer.from(match[1]!.replace(/\s+/g, ""), "base64");
  }
  return input;
}

/**
 * The cluster names an agent certificate grants (its `cluster-proxy://cluster/<name>` URI SANs),
 * in certificate order, without duplicates. Accepts PEM text (the first certificate is used),
 * DER bytes (e.g. `tlsSocket.getPeerCertificate().raw`) or a node `X509Certificate`.
 * Returns `[]` for a certificate that grants no cluster; throws for unreadable input.
 */
export function clusterNamesFromCertificate(pemOrDer: string | Uint8Array | NodeX509Certificate): string[] {
  const cert = new x509.X509Certificate(toDer(pemOrDer));
  const names: string[] = [];
  for (const ext of cert.getExtensions(x509.SubjectAlternativeNameExtension)) {
    for (const item of ext.names.items) {
      if (item.type !== "url" || !item.value.startsWith(AGENT_CLUSTER_URI_PREFIX)) continue;
      let name: string;
      try {
        name = decodeURIComponent(item.value.slice(AGENT_CLUSTER_URI_PREFIX.length));
      } catch {
        continue;
      }
      if (name !== "" && !names.includes(name)) names.push(name);
    }
  }
  return names;
}
