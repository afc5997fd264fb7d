/**
 * Approving and signing the proxy-agents' certificate requests (signer
 * `open-cluster-management.io/proxy-agent-signer`): the cluster from what the hub apiserver vouches for.
 * Design: docs/design/addon-manager.md#certificate-requests
 */
import { ADDON_NAME, ADDON_NAME_LABEL } from "@cluster-proxy/api";
import { isClusterName } from "@cluster-proxy/api/cluster-name";
import { parseCertificateRequest, type ParsedCertificateRequest } from "@cluster-proxy/pki";
import type { KubeObject } from "@cluster-proxy/kube";
import { errorMessage } from "@cluster-proxy/errors";

export const AGENT_SIGNER = "open-cluster-management.io/proxy-agent-signer";
/**
 * The hub apiserver's client signer: the agent's hub identity with entrypoint PortForward. We only
 * approve (kube-controller-manager signs), after the same checks as for our own signer.
 */
export const HUB_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client";
/**
 * OCM's registration agent stops requesting certificates for a cluster's addon while this many CSRs
 * with its cluster-name and addon-name labels exist on the hub (`addonCSRThreshold` in OCM v1.2.1's
 * registration, pkg/registration/register/csr/csr.go).
 */
export const OCM_ADDON_CSR_LIMIT = 10;
export const CLUSTER_NAME_LABEL = "open-cluster-management.io/cluster-name";
const USER_PREFIX = "system:open-cluster-management:";
const MANAGED_CLUSTERS_GROUP = "system:open-cluster-management:managed-clusters";
/** Usages a request may list (OCM's registration agent asks for client auth; the certificate gets both). */
const ALLOWED_USAGES = new Set(["digital signature", "key encipherment", "client auth", "server auth"]);

export interface CsrObject extends KubeObject {
  spec: {
    request: string;
    signerName: string;
    username?: string;
    groups?: string[];
    usages?: string[];
    expirationSeconds?: number;
  };
  status?: {
    conditions?: { type: string; status?: string; reason?: string; lastUpdateTime?: string }[];
    certificate?: string;
  };
}

/** The subject a registration asks the agent's CSR to carry. */
export interface RegistrationSubject {
  user: string;
  groups: string[];
  organizationUnit?: string[];
}

/** What the checks need to know about the hub. */
export interface CsrContext {
  /** The ManagedCluster `name`, if it exists. */
  cluster(name: string): { hubAcceptsClient: boolean } | undefined;
  /**
   * Our ManagedClusterAddOn in namespace `cluster`, if it exists, with the subjects it registers:
   * `subject` for our signer, `hubClientSubject` for {@link HUB_CLIENT_SIGNER} (PortForward only).
   */
  addon(
    cluster: string,
  ): { deleting: boolean; subject?: RegistrationSubject; hubClientSubject?: RegistrationSubject } | undefined;
}

export type CsrVerdict =
  /** Approve and sign for `cluster`. */
  | { action: "approve"; cluster: string }
  /** Never acceptable (identity, signer, usages): deny with `reason`. */
  | { action: "deny"; reason: string }
  /** Not yet acceptable (cluster not accepted, addon or registration not there yet): look again later. */
  | { action: "wait"; reason: string };

/** Whether a CSR is one of ours at all (the filter; everything else is left alone). */
export function isOurCsr(csr: CsrObject): boolean {
  return (
    csr.metadata.labels?.[ADDON_NAME_LABEL] === ADDON_NAME &&
    (csr.spec.signerName === AGENT_SIGNER || csr.spec.signerName === HUB_CLIENT_SIGNER)
  );
}

/** The subject the addon registers for the CSR's signer. */
function registeredSubject(csr: CsrObject, addon: ReturnType<CsrContext["addon"]>): RegistrationSubject | undefined {
  return csr.spec.signerName === HUB_CLIENT_SIGNER ? addon?.hubClientSubject : addon?.subject;
}

/** The cluster named by an OCM registration agent's username, or undefined when it is not one. */
export function clusterOfUsername(username: string | undefined): string | undefined {
  if (!username?.startsWith(USER_PREFIX)) return undefined;
  const parts = username.slice(USER_PREFIX.length).split(":");
  if (parts.length !== 2 || !parts[0] || !parts[1]) return undefined;
  return isClusterName(parts[0]) ? parts[0] : undefined;
}

const sameSet = (a: readonly string[], b: readonly string[]): boolean =>
  new Set(a).size === new Set(b).size && a.every((x) => b.includes(x));

/** The checks that need no parsing of the request (everything but the subject). */
export function checkCsrIdentity(csr: CsrObject, ctx: CsrContext): CsrVerdict {
  if (csr.spec.signerName !== AGENT_SIGNER && csr.spec.signerName !== HUB_CLIENT_SIGNER)
    return { action: "deny", reason: `signer ${csr.spec.signerName} is not ours` };
  const cluster = clusterOfUsername(csr.spec.username);
  if (!cluster)
    return {
      action: "deny",
      reason: `requester "${csr.spec.username ?? ""}" is not a cluster's registration agent (system:open-cluster-management:<cluster>:<agent>)`,
    };
  const groups = csr.spec.groups ?? [];
  if (!groups.includes(`${USER_PREFIX}${cluster}`) || !groups.includes(MANAGED_CLUSTERS_GROUP))
    return {
      action: "deny",
      reason: `requester of cluster ${cluster} lacks the groups ${USER_PREFIX}${cluster} and ${MANAGED_CLUSTERS_GROUP}`,
    };
  const labels = csr.metadata.labels ?? {};
  if (labels[CLUSTER_NAME_LABEL] !== cluster)
    return {
      action: "deny",
      reason: `label ${CLUSTER_NAME_LABEL}=${labels[CLUSTER_NAME_LABEL] ?? ""} does not name the requester's cluster ${cluster}`,
    };
  if (labels[ADDON_NAME_LABEL] !== ADDON_NAME)
    return { action: "deny", reason: `label ${ADDON_NAME_LABEL} is not ${ADDON_NAME}` };
  if (!csr.metadata.name.startsWith(`addon-${cluster}-${ADDON_NAME}-`))
    return { action: "deny", reason: `name ${csr.metadata.name} is not addon-${cluster}-${ADDON_NAME}-<suffix>` };
  const usages = csr.spec.usages ?? [];
  const extra = usages.filter((u) => !ALLOWED_USAGES.has(u));
  if (extra.length > 0 || !usages.includes("client auth"))
    return {
      action: "deny",
      reason: `usages ${usages.join(", ")}: only client auth (with digital signature, key encipherment, server auth) is signed`,
    };
  const mc = ctx.cluster(cluster);
  if (!mc) return { action: "wait", reason: `ManagedCluster ${cluster} does not exist` };
  if (!mc.hubAcceptsClient)
    return { action: "wait", reason: `ManagedCluster ${cluster} is not accepted (hubAcceptsClient)` };
  const addon = ctx.addon(cluster);
  if (!addon) return { action: "wait", reason: `ManagedClusterAddOn ${cluster}/${ADDON_NAME} does not exist` };
  if (addon.deleting)
    return { action: "wait", reason: `ManagedClusterAddOn ${cluster}/${ADDON_NAME} is being deleted` };
  if (!registeredSubject(csr, addon))
    return {
      action: "wait",
      reason: `ManagedClusterAddOn ${cluster}/${ADDON_NAME} has no registration of signer ${csr.spec.signerName}${csr.spec.signerName === HUB_CLIENT_SIGNER ? " (only with entrypoint PortForward)" : " yet"}`,
    };
  return { action: "approve", cluster };
}

/** The subject of the request must be exactly the one we published for that cluster. */
export function checkRequestSubject(
  parsed: ParsedCertificateRequest,
  subject: RegistrationSubject,
): string | undefined {
  if (parsed.commonName !== subject.user)
    return `requested CN "${parsed.commonName}" is not the registered user "${subject.user}"`;
  if (!sameSet(parsed.organizations, subject.groups))
    return `requested O [${parsed.organizations.join(", ")}] is not the registered groups [${subject.groups.join(", ")}]`;
  if (!sameSet(parsed.organizationalUnits, subject.organizationUnit ?? []))
    return `requested OU [${parsed.organizationalUnits.join(", ")}] is not the registered [${(subject.organizationUnit ?? []).join(", ")}]`;
  return undefined;
}

/** Every check, the request's own signature and subject included. */
export async function checkCsr(csr: CsrObject, ctx: CsrContext): Promise<CsrVerdict> {
  const verdict = checkCsrIdentity(csr, ctx);
  if (verdict.action !== "approve") return verdict;
  let parsed: ParsedCertificateRequest;
  try {
    parsed = await parseCertificateRequest(Buffer.from(csr.spec.request, "base64").toString("utf8"));
  } catch (err) {
    return { action: "deny", reason: errorMessage(err) };
  }
  const subject = registeredSubject(csr, ctx.addon(verdict.cluster));
  const mismatch = subject ? checkRequestSubject(parsed, subject) : "no registered subject";
  // A request for another subject (also one made before the agent CA rotated, which changes the
  // OU we publish) is refused: the registration agent then asks again with the current subject.
  return mismatch ? { action: "deny", reason: mismatch } : verdict;
}

export const csrState = (csr: CsrObject): "approved" | "denied" | "pending" => {
  const c = csr.status?.conditions ?? [];
  if (c.some((x) => x.type === "Denied" || x.type === "Failed")) return "denied";
  if (c.some((x) => x.type === "Approved")) return "approved";
  return "pending";
};
