/**
 * Per-cluster agent identity, carried in the agent's client certificate as `cluster-proxy://cluster/<name>`
 * URI SANs: encoding them, and reading the granted names ({@link clusterNamesFromCertificate}).
 * Design: docs/design/decisions.md#agent-identity-exact-grants-only-destination-policy-judged-after-resolution
 */
import { X509Certificate as NodeX509Certificate } from "node:crypto";
import { clusterNameProblem } from "@cluster-proxy/api/cluster-name";
import { CertificateError } from "./certificates.js";

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

function toDer(input: string | Uint8Array): Uint8Array {
  if (typeof input === "string") {
    const match = /-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/.exec(input);
    if (!match) throw new CertificateError("not a PEM certificate (no BEGIN CERTIFICATE block)");
    return Buffer.from(match[1]!.replace(/\s+/g, ""), "base64");
  }
  return input;
}

/**
 * One entry of node's subject-alternative-name text (`X509Certificate#subjectAltName`,
 * `getPeerCertificate().subjectaltname`): `TYPE:value`, entries joined by ", ". node writes a value
 * as a JSON string literal whenever it holds a comma, a quote, a backslash or a control character
 * (always for DirName), so an unquoted value never holds ", " and the split is exact.
 */
const SAN_ENTRY = /([A-Za-z][A-Za-z ]*):("(?:[^"\\]|\\.)*"|[^,]*)(?:, |$)/y;

/**
 * The cluster names granted by the `cluster-proxy://cluster/<name>` URIs of node's text of a
 * certificate's subject alternative names (see {@link SAN_ENTRY}; undefined or "" when it has
 * none), in order, without duplicates. Throws a CertificateError for text that does not parse.
 *
 * This is what the proxy server reads for every agent connection (`getPeerX509Certificate()`):
 * node parses the certificate natively once, where @peculiar/x509 (ASN.1 in JavaScript) cost a
 * third of the server's CPU while 10,000 agents connected.
 */
export function clusterNamesFromSubjectAltName(san: string | undefined): string[] {
  const names: string[] = [];
  if (!san) return names;
  SAN_ENTRY.lastIndex = 0;
  while (SAN_ENTRY.lastIndex < san.length) {
    const at = SAN_ENTRY.lastIndex;
    const m = SAN_ENTRY.exec(san);
    if (!m || SAN_ENTRY.lastIndex === at) {
      throw new CertificateError(`unreadable subject alternative names at offset ${at}`);
    }
    if (m[1] !== "URI") continue;
    const raw = m[2]!;
    let uri: string;
    try {
      uri = raw.startsWith('"') ? (JSON.parse(raw) as string) : raw;
    } catch {
      throw new CertificateError(`unreadable subject alternative names at offset ${at}`);
    }
    if (!uri.startsWith(AGENT_CLUSTER_URI_PREFIX)) continue;
    let name: string;
    try {
      name = decodeURIComponent(uri.slice(AGENT_CLUSTER_URI_PREFIX.length));
    } catch {
      continue;
    }
    if (name !== "" && !names.includes(name)) names.push(name);
  }
  return names;
}

/**
 * The cluster names an agent certificate grants (its `cluster-proxy://cluster/<name>` URI SANs),
 * in certificate order, without duplicates. Accepts PEM text (the first certificate is used),
 * DER bytes (e.g. `tlsSocket.getPeerCertificate().raw`) or a node `X509Certificate`.
 * Returns `[]` for a certificate that grants no cluster; throws for unreadable input.
 */
export function clusterNamesFromCertificate(pemOrDer: string | Uint8Array | NodeX509Certificate): string[] {
  const cert = pemOrDer instanceof NodeX509Certificate ? pemOrDer : new NodeX509Certificate(toDer(pemOrDer));
  return clusterNamesFromSubjectAltName(cert.subjectAltName);
}
