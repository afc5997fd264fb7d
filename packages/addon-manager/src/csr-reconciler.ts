/**
 * The `csrs` controller: approve (or deny) and sign the agents' CertificateSigningRequests, and
 * delete them once collected. Design: docs/design/addon-manager.md#certificate-requests
 */
import { agentClusterUri, signCertificateRequest } from "@cluster-proxy/pki";
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";
import { ensureAgentCa, type AddonCache, type AgentCaOptions } from "./addon-reconciler.js";
import {
  AGENT_SIGNER,
  CLUSTER_NAME_LABEL,
  HUB_CLIENT_SIGNER,
  checkCsr,
  csrState,
  isOurCsr,
  type CsrContext,
  type CsrObject,
  type RegistrationSubject,
} from "./csr-signer.js";
import { Resources } from "./resources.js";
import { isConflict, isNotFound, type ControllerSpec, type KubeApi, type ReconcileResult } from "@cluster-proxy/kube";

const DAY_MS = 86_400_000;
/** The reason of the Approved condition we write: how a CSR we approved is told from others. */
export const APPROVAL_REASON = "AutoApprovedByClusterProxyAddonManager";

/** What the CSR reconciler is told besides the agent CA. */
export interface CsrOptions extends AgentCaOptions {
  /**
   * Delete a CSR we approved this long after its certificate was issued (`--csr-cleanup-after`;
   * 0: never, kube-controller-manager's cleaner removes it after an hour).
   */
  csrCleanupAfterMs?: number;
}

/**
 * The `csrs` controller's reconciler, keyed by CSR name, in named steps: the checks of
 * csr-signer.ts against the watch caches ({@link CsrReconciler.csrContext}), then
 * {@link CsrReconciler.deny} or approve, then {@link CsrReconciler.sign} with the agent CA (the hub
 * apiserver's client signer is kube-controller-manager's to sign), and {@link CsrReconciler.cleanUp}.
 */
export class CsrReconciler implements ControllerSpec<string> {
  readonly what = "addon reconcile";
  /** CSRs this process saw without a certificate (so it sees the moment theirs is issued). */
  private readonly unissuedSeen = new Set<string>();
  /** When this process saw the certificate of a CSR in {@link unissuedSeen} issued. */
  private readonly issuedSeenAt = new Map<string, number>();

  constructor(
    private readonly api: KubeApi,
    private readonly cache: Pick<AddonCache, "cluster" | "addon" | "csr" | "csrsOf">,
    private readonly options: CsrOptions,
    private readonly logger: Logger,
    /** What "now" is for approvals, cleanup and the agent CA. */
    private readonly clock: Clock = realClock,
  ) {}

  logFields(name: string): Record<string, unknown> {
    return { key: `csr/${name}` };
  }

  /** The checks for CertificateSigningRequests (from the caches). */
  csrContext(): CsrContext {
    return {
      cluster: (name) => {
        const mc = this.cache.cluster(name);
        return mc ? { hubAcceptsClient: mc.spec?.hubAcceptsClient === true } : undefined;
      },
      addon: (cluster) => {
        const mca = this.cache.addon(cluster);
        if (!mca) return undefined;
        const registered = (signer: string): RegistrationSubject | undefined =>
          mca.status?.registrations?.find((r) => r.signerName === signer)?.subject;
        const subject = registered(AGENT_SIGNER);
        const hubClientSubject = registered(HUB_CLIENT_SIGNER);
        return {
          deleting: Boolean(mca.metadata.deletionTimestamp),
          ...(subject ? { subject } : {}),
          ...(hubClientSubject ? { hubClientSubject } : {}),
        };
      },
    };
  }

  /** Approve (or deny) and sign one of the agents' certificate requests. */
  async reconcile(name: string): Promise<ReconcileResult> {
    let csr = this.cache.csr(name);
    if (!csr) return this.forget(name);
    if (!isOurCsr(csr) || csrState(csr) === "denied") return;
    if (csr.status?.certificate) return this.cleanUp(csr);
    this.unissuedSeen.add(name);
    const verdict = await checkCsr(csr, this.csrContext());
    if (verdict.action === "wait") {
      this.logger.debug({ csr: name, why: verdict.reason }, "certificate request not yet approvable");
      return { requeueAfterMs: 10_000 };
    }
    if (verdict.action === "deny") {
      await this.deny(csr, verdict.reason);
      return;
    }
    if (csrState(csr) === "pending")
      csr = await this.setCondition(
        csr,
        "Approved",
        APPROVAL_REASON,
        `requested by cluster ${verdict.cluster}'s registration agent for its cluster-proxy agent`,
      );
    // The hub apiserver's client signer is kube-controller-manager's to sign.
    if (csr.spec.signerName === HUB_CLIENT_SIGNER) {
      this.logger.info({ csr: name, cluster: verdict.cluster }, "approved the agent's hub client certificate request");
      return;
    }
    await this.sign(csr, verdict.cluster);
  }

  /**
   * Step: delete a request we approved once its certificate was issued and `--csr-cleanup-after`
   * has passed, or at once when a newer request of the same cluster and signer exists, so that repeated installs never reach OCM's limit of `OCM_ADDON_CSR_LIMIT` (csr-signer.ts)
   * CSRs per cluster and addon (docs/design/addon-manager.md, "Certificate requests"). The
   * registration agent reads the certificate from its CSR informer at once; one deleted before it
   * did is asked for again with a new CSR. Issued-at is when this process saw the certificate
   * appear, else (issued before this process ran) the time of our approval. Requests approved by
   * anyone else, denied or never issued are left alone.
   */
  private async cleanUp(csr: CsrObject): Promise<ReconcileResult> {
    const afterMs = this.options.csrCleanupAfterMs ?? 0;
    const name = csr.metadata.name;
    const approved = csr.status?.conditions?.find((c) => c.type === "Approved" && c.status !== "False");
    if (afterMs <= 0 || approved?.reason !== APPROVAL_REASON || !csr.metadata.labels?.[CLUSTER_NAME_LABEL]) return;
    const now = this.clock.now();
    let issuedAt = this.issuedSeenAt.get(name);
    if (issuedAt === undefined) {
      const approvedAt = Date.parse(approved.lastUpdateTime ?? "");
      issuedAt = this.unissuedSeen.has(name) || Number.isNaN(approvedAt) ? now : approvedAt;
      this.issuedSeenAt.set(name, issuedAt);
    }
    const newer = this.newerRequest(csr);
    const left = issuedAt + afterMs - now;
    if (left > 0 && !newer) return { requeueAfterMs: left };
    try {
      await this.api.delete(Resources.certificateSigningRequest, name, undefined, {
        ...(csr.metadata.uid ? { uid: csr.metadata.uid } : {}),
        ...(csr.metadata.resourceVersion ? { resourceVersion: csr.metadata.resourceVersion } : {}),
      });
    } catch (err) {
      // Changed since we read it: its watch event queues it again.
      if (isConflict(err)) return;
      throw err;
    }
    this.forget(name);
    this.logger.info(
      {
        csr: name,
        cluster: csr.metadata.labels[CLUSTER_NAME_LABEL],
        issuedMsAgo: now - issuedAt,
        ...(newer ? { supersededBy: newer } : {}),
      },
      "deleted an issued certificate request",
    );
    return;
  }

  /**
   * A request of the same cluster and signer created after `csr` (a later second), if any: the
   * registration agent asks anew only once it no longer waits for an earlier request (it collected
   * it, or it restarted, or its addon was reinstalled), so `csr` is of no more use to anyone.
   */
  private newerRequest(csr: CsrObject): string | undefined {
    const cluster = csr.metadata.labels?.[CLUSTER_NAME_LABEL];
    const created = Date.parse(csr.metadata.creationTimestamp ?? "");
    if (!cluster || Number.isNaN(created)) return undefined;
    return this.cache
      .csrsOf?.(cluster)
      .find(
        (other) =>
          other.metadata.name !== csr.metadata.name &&
          isOurCsr(other) &&
          other.spec.signerName === csr.spec.signerName &&
          Date.parse(other.metadata.creationTimestamp ?? "") > created,
      )?.metadata.name;
  }

  private forget(name: string): void {
    this.unissuedSeen.delete(name);
    this.issuedSeenAt.delete(name);
  }

  /** Step: deny a pending request that fails the checks; an approved one is only not signed. */
  private async deny(csr: CsrObject, reason: string): Promise<void> {
    const name = csr.metadata.name;
    if (csrState(csr) !== "pending") {
      this.logger.warn({ csr: name, why: reason }, "an approved certificate request fails our checks: not signing it");
      return;
    }
    this.logger.warn({ csr: name, why: reason }, "denying a certificate request");
    await this.setCondition(csr, "Denied", "ClusterProxyIdentityMismatch", reason);
  }

  /**
   * Step: sign with the agent CA for `cluster` (its URI SAN), for the shorter of
   * `--cert-validity` and the request's `expirationSeconds`; a request deleted meanwhile is let go.
   */
  private async sign(csr: CsrObject, cluster: string): Promise<void> {
    const ca = await ensureAgentCa(this.api, this.options, this.clock);
    const validityDays = Math.min(
      this.options.certValidityMs / DAY_MS,
      csr.spec.expirationSeconds ? csr.spec.expirationSeconds / 86_400 : Infinity,
    );
    const certPem = await signCertificateRequest(ca.cert, Buffer.from(csr.spec.request, "base64").toString("utf8"), {
      uris: [agentClusterUri(cluster)],
      // clientAuth towards the proxy-servers, serverAuth for the agent's gateway endpoint.
      usage: "both",
      validityDays,
    });
    try {
      await this.api.replace(
        Resources.certificateSigningRequest,
        { ...csr, status: { ...(csr.status ?? {}), certificate: Buffer.from(certPem).toString("base64") } },
        "status",
      );
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    this.logger.info({ csr: csr.metadata.name, cluster }, "signed the agent certificate");
  }

  private async setCondition(
    csr: CsrObject,
    type: "Approved" | "Denied",
    reason: string,
    message: string,
  ): Promise<CsrObject> {
    const conditions = [
      ...(csr.status?.conditions ?? []),
      {
        type,
        status: "True",
        reason,
        message,
        lastUpdateTime: new Date(this.clock.now()).toISOString().replace(/\.\d+Z$/, "Z"),
      },
    ];
    return this.api.replace<CsrObject>(
      Resources.certificateSigningRequest,
      { ...csr, status: { ...(csr.status ?? {}), conditions } },
      "approval",
    );
  }
}
