/**
 * Binding an agent's routing identity to its client certificate (`--agent-identity`): which
 * `agentidentifiers` a certificate's cluster grants allow (`certificate`), or anything (`shared`, as Go).
 * Design: docs/design/decisions.md#agent-identity-exact-grants-only-destination-policy-judged-after-resolution
 */
import { createHash, X509Certificate } from "node:crypto";
import type { AgentIdentityMode } from "@cluster-proxy/api";
import { clusterNamesFromCertificate } from "@cluster-proxy/pki";
import type { AgentIdentifiers } from "@cluster-proxy/protocol";
import { errorMessage } from "@cluster-proxy/errors";

/** Domain of the Go cluster-proxy addon's service-proxy host names. */
export const SERVICE_PROXY_DOMAIN = ".open-cluster-management.proxy";

/** Why an agent was refused (label values of `cluster_proxy_server_agent_identity_refusals_total`). */
export type IdentityRefusalReason = "host_not_granted" | "address_identifier" | "unreadable_certificate";

/** A refused agent: the metric reason, the identifier at fault and the text sent to the agent. */
export interface IdentityRefusal {
  reason: IdentityRefusalReason;
  identifier: string;
  message: string;
}

/** The Go cluster-proxy addon's service-proxy host for `cluster` (`pkg/util/serviceurl.go`). */
export function serviceProxyHost(cluster: string): string {
  return `cluster-${createHash("sha256").update(cluster).digest("hex")}`.slice(0, 56) + SERVICE_PROXY_DOMAIN;
}

function normalize(host: string): string {
  const h = host.toLowerCase();
  return h.endsWith(".") ? h.slice(0, -1) : h;
}

/** Every host identifier the granted cluster names allow (normalized: lowercase, no trailing dot). */
export function grantedHosts(granted: readonly string[], namespaces: readonly string[]): Set<string> {
  const hosts = new Set<string>();
  for (const name of granted) {
    const n = normalize(name);
    hosts.add(n);
    for (const ns of namespaces) if (ns !== "") hosts.add(`${n}.${normalize(ns)}`);
    hosts.add(serviceProxyHost(name));
  }
  return hosts;
}

function grantsText(granted: readonly string[]): string {
  return granted.length
    ? `it grants ${granted.map((g) => `"${g}"`).join(", ")}`
    : "it grants no cluster: no cluster-proxy://cluster/<name> URI SAN";
}

const REMEDY =
  "use a certificate that grants the cluster (cluster-proxy certs issues one per cluster), or run the server with --agent-identity=shared";

/**
 * Check `identifiers` against the granted cluster names. Returns the first refusal, or undefined
 * when every identifier is granted.
 */
export function checkAgentIdentifiers(
  identifiers: AgentIdentifiers,
  granted: readonly string[],
  namespaces: readonly string[],
): IdentityRefusal | undefined {
  const addressIds = [
    ...identifiers.ipv4.map((v) => `ipv4=${v}`),
    ...identifiers.ipv6.map((v) => `ipv6=${v}`),
    ...identifiers.cidr.map((v) => `cidr=${v}`),
    ...(identifiers.defaultRoute ? ["default-route=true"] : []),
  ];
  if (addressIds.length) {
    const identifier = addressIds[0]!;
    return {
      reason: "address_identifier",
      identifier,
      message: `agent identifier "${identifier}" is refused: with --agent-identity=certificate an agent may only claim the host names its certificate grants (${grantsText(granted)}), not addresses or the default route; run the server with --agent-identity=shared to allow them`,
    };
  }
  const allowed = grantedHosts(granted, namespaces);
  for (const host of identifiers.host) {
    if (allowed.has(normalize(host))) continue;
    return {
      reason: "host_not_granted",
      identifier: `host=${host}`,
      message: `agent identifier "host=${host}" is not granted by the agent's certificate (${grantsText(granted)}); ${REMEDY}`,
    };
  }
  return undefined;
}

/**
 * Decide whether an agent may announce `identifiers`, given its peer certificate (as node's
 * `tlsSocket.getPeerX509Certificate()`, or DER; undefined when none was presented).
 */
export function verifyAgentIdentity(
  mode: AgentIdentityMode,
  identifiers: AgentIdentifiers,
  peerCertificate: X509Certificate | Uint8Array | undefined,
  namespaces: readonly string[],
): { granted: string[]; refusal?: IdentityRefusal } {
  if (mode === "shared") return { granted: [] };
  let granted: string[] = [];
  if (peerCertificate && (peerCertificate instanceof X509Certificate || peerCertificate.length > 0)) {
    try {
      granted = clusterNamesFromCertificate(peerCertificate);
    } catch (err) {
      return {
        granted,
        refusal: {
          reason: "unreadable_certificate",
          identifier: "",
          message: `cannot read the cluster names of the agent's certificate: ${errorMessage(err)}`,
        },
      };
    }
  }
  const refusal = checkAgentIdentifiers(identifiers, granted, namespaces);
  return refusal ? { granted, refusal } : { granted };
}
