/**
 * The agents' CertificateSigningRequests (docs/design/addon-manager.md, "Certificate requests"):
 * one controller's reconcile, in named steps: the checks of csr-signer.ts against the watch caches
 * ({@link CsrReconciler.csrContext}), then {@link CsrReconciler.deny} or approve, then
 * {@link CsrReconciler.sign} with the agent CA (the hub apiserver's client signer is
 * kube-controller-manager's to sign).
 */
import { agentClusterUri, signCertificateRequest } from "@cluster-proxy/pki";
import type { Logger } from "@cluster-proxy/kit";
import { ensureAgentCa, type AddonCache, type AddonOptions } from "./addon-registration.js";
import {
  AGENT_SIGNER,
  HUB_CLIENT_SIGNER,
  checkCsr,
  csrState,
  isOurCsr,
  type CsrContext,
  type CsrObject,
  type RegistrationSubject,
} from "./csr-signer.js";
import { Resources } from "./resources.js";
import { isNotFound, type KubeApi } from "./runtime/kube-api.js";
import type { ReconcileResult } from "./runtime/work-queue.js";

const DAY_MS = 86_400_000;

/** Approves (or denies) and signs the agents' certificate requests. */
export class CsrReconciler {
  constructor(
    private readonly api: KubeApi,
    private readonly cache: Pick<AddonCache, "cluster" | "addon" | "csr">,
    private readonly options: Omit<AddonOptions, "installPlacement">,
    private readonly logger: Logger,
  ) {}

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
  async reconcileCsr(name: string): Promise<ReconcileResult> {
    let csr = this.cache.csr(name);
    if (!csr || !isOurCsr(csr) || csrState(csr) === "denied" || csr.status?.certificate) return;
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
        "AutoApprovedByClusterProxyAddonManager",
        `requested by cluster ${verdict.cluster}'s registration agent for its cluster-proxy agent`,
      );
    // The hub apiserver's client signer is kube-controller-manager's to sign.
    if (csr.spec.signerName === HUB_CLIENT_SIGNER) {
      this.logger.info({ csr: name, cluster: verdict.cluster }, "approved the agent's hub client certificate request");
      return;
    }
    await this.sign(csr, verdict.cluster);
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
    const ca = await ensureAgentCa(this.api, this.options);
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
      { type, status: "True", reason, message, lastUpdateTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") },
    ];
    return this.api.replace<CsrObject>(
      Resources.certificateSigningRequest,
      { ...csr, status: { ...(csr.status ?? {}), conditions } },
      "approval",
    );
  }
}
