import assert from "node:assert/strict";
import { test } from "node:test";
import { silentLogger } from "@cluster-proxy/kit";
import { certificateRequest } from "@cluster-proxy/pki/testing";
import type { AddonCache, ManagedCluster, ManagedClusterAddOn } from "./addon-registration.js";
import { APPROVAL_REASON, CsrReconciler } from "./csr-approval.js";
import { ADDON_NAME } from "@cluster-proxy/api";
import { CLUSTER_NAME_LABEL, HUB_CLIENT_SIGNER, OCM_ADDON_CSR_LIMIT, type CsrObject } from "./csr-signer.js";
import { KubeApiError, type KubeApi } from "@cluster-proxy/kube";

const SUBJECT = {
  user: "open-cluster-management:cluster-proxy:mc1:hub-client",
  groups: ["open-cluster-management:cluster-proxy:mc1"],
};
const MINUTE = 60_000;

/**
 * A fake hub for the CSR reconciler: CSRs by name (the watch cache is the same map), the approval
 * subresource writes through, DELETE honours the uid and resourceVersion preconditions, and every
 * call is recorded.
 */
function fakeHub(): {
  api: KubeApi;
  csrs: Map<string, CsrObject>;
  deletes: { name: string; preconditions?: { uid?: string; resourceVersion?: string } }[];
  cache: Pick<AddonCache, "cluster" | "addon" | "csr" | "csrsOf">;
} {
  const csrs = new Map<string, CsrObject>();
  const deletes: { name: string; preconditions?: { uid?: string; resourceVersion?: string } }[] = [];
  let rv = 100;
  const api = {
    replace: (_ref: unknown, obj: CsrObject) => {
      const stored = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++rv) } };
      csrs.set(obj.metadata.name, stored);
      return Promise.resolve(stored);
    },
    delete: (_ref: unknown, name: string, _ns?: string, preconditions?: { uid?: string; resourceVersion?: string }) => {
      deletes.push({ name, ...(preconditions ? { preconditions } : {}) });
      const stored = csrs.get(name);
      if (
        stored &&
        ((preconditions?.uid && preconditions.uid !== stored.metadata.uid) ||
          (preconditions?.resourceVersion && preconditions.resourceVersion !== stored.metadata.resourceVersion))
      )
        return Promise.reject(new KubeApiError(409, "Conflict", "precondition failed"));
      csrs.delete(name);
      return Promise.resolve();
    },
  } as unknown as KubeApi;
  const mc: ManagedCluster = {
    apiVersion: "cluster.open-cluster-management.io/v1",
    kind: "ManagedCluster",
    metadata: { name: "mc1" },
    spec: { hubAcceptsClient: true },
  };
  const mca = {
    metadata: { name: ADDON_NAME, namespace: "mc1" },
    status: { registrations: [{ signerName: HUB_CLIENT_SIGNER, subject: SUBJECT }] },
  } as unknown as ManagedClusterAddOn;
  const cache = {
    cluster: (name: string) => (name === "mc1" ? mc : undefined),
    addon: (cluster: string) => (cluster === "mc1" ? mca : undefined),
    csr: (name: string) => csrs.get(name),
    csrsOf: (cluster: string) => [...csrs.values()].filter((c) => c.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster),
  };
  return { api, csrs, deletes, cache };
}

async function hubClientCsr(name: string, over: Partial<CsrObject["metadata"]> = {}): Promise<CsrObject> {
  const pem = await certificateRequest(SUBJECT.user, SUBJECT.groups);
  return {
    metadata: {
      name,
      uid: `uid-${name}`,
      resourceVersion: "1",
      labels: { [CLUSTER_NAME_LABEL]: "mc1", "open-cluster-management.io/addon-name": ADDON_NAME },
      ...over,
    },
    spec: {
      request: Buffer.from(pem).toString("base64"),
      signerName: HUB_CLIENT_SIGNER,
      username: "system:open-cluster-management:mc1:mc1-agent",
      groups: ["system:open-cluster-management:mc1", "system:open-cluster-management:managed-clusters"],
      usages: ["digital signature", "key encipherment", "client auth"],
    },
  };
}

/** What kube-controller-manager does for the hub client signer: write the certificate. */
function issue(csrs: Map<string, CsrObject>, name: string): void {
  const csr = csrs.get(name)!;
  csrs.set(name, {
    ...csr,
    metadata: { ...csr.metadata, resourceVersion: `${csr.metadata.resourceVersion}-issued` },
    status: { ...csr.status, certificate: Buffer.from("-----BEGIN CERTIFICATE-----").toString("base64") },
  });
}

const issuedBy = (reason: string, at: string): NonNullable<CsrObject["status"]> => ({
  conditions: [{ type: "Approved", status: "True", reason, lastUpdateTime: at }],
  certificate: Buffer.from("cert").toString("base64"),
});

test("a CSR we approved is deleted --csr-cleanup-after its certificate was issued, not before, and only once unchanged", async () => {
  const hub = fakeHub();
  let now = Date.parse("2026-01-01T00:00:00Z");
  const reconciler = new CsrReconciler(
    hub.api,
    hub.cache,
    {
      signerNamespace: "ns",
      signerName: "signer",
      caValidityMs: 1,
      certValidityMs: 1,
      csrCleanupAfterMs: 2 * MINUTE,
      now: () => now,
    },
    silentLogger,
  );
  hub.csrs.set("addon-mc1-cluster-proxy-a", await hubClientCsr("addon-mc1-cluster-proxy-a"));
  // Pending: approved (kube-controller-manager signs this signer); nothing deleted.
  assert.equal(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), undefined);
  assert.equal(hub.csrs.get("addon-mc1-cluster-proxy-a")?.status?.conditions?.[0]?.reason, APPROVAL_REASON);
  assert.equal(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), undefined);
  // Issued ten minutes after the approval: the grace counts from the issue this process saw.
  now += 10 * MINUTE;
  issue(hub.csrs, "addon-mc1-cluster-proxy-a");
  assert.deepEqual(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), { requeueAfterMs: 2 * MINUTE });
  now += MINUTE;
  assert.deepEqual(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), { requeueAfterMs: MINUTE });
  assert.equal(hub.deletes.length, 0, "not before the grace period");
  // Changed meanwhile (the cache is behind): the precondition refuses, nothing is lost.
  const cached = hub.csrs.get("addon-mc1-cluster-proxy-a")!;
  const stale = { ...cached, metadata: { ...cached.metadata, resourceVersion: "stale" } };
  const cache = { ...hub.cache, csr: (name: string) => (name === cached.metadata.name ? stale : undefined) };
  now += MINUTE;
  const behind = new CsrReconciler(
    hub.api,
    cache,
    {
      signerNamespace: "ns",
      signerName: "signer",
      caValidityMs: 1,
      certValidityMs: 1,
      csrCleanupAfterMs: 2 * MINUTE,
      now: () => now,
    },
    silentLogger,
  );
  // (A fresh process: it did not see the issue, so the approval time counts, 12 minutes ago.)
  assert.equal(await behind.reconcileCsr(cached.metadata.name), undefined);
  assert.ok(hub.csrs.has(cached.metadata.name), "a CSR changed since it was read is not deleted");
  assert.equal(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), undefined);
  assert.equal(hub.csrs.has("addon-mc1-cluster-proxy-a"), false, "deleted once the grace period passed");
  assert.deepEqual(hub.deletes.at(-1)?.preconditions, {
    uid: "uid-addon-mc1-cluster-proxy-a",
    resourceVersion: cached.metadata.resourceVersion,
  });
  // Gone from the cache: forgotten, nothing more to do.
  assert.equal(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), undefined);
});

test("only CSRs of the addon that we approved and that are issued are ever deleted", async () => {
  const hub = fakeHub();
  const now = Date.parse("2026-01-01T01:00:00Z");
  const options = {
    signerNamespace: "ns",
    signerName: "signer",
    caValidityMs: 1,
    certValidityMs: 1,
    csrCleanupAfterMs: 2 * MINUTE,
    now: () => now,
  };
  const reconciler = new CsrReconciler(hub.api, hub.cache, options, silentLogger);
  const longAgo = "2026-01-01T00:00:00Z";
  const recently = "2026-01-01T00:59:30Z";
  const put = async (name: string, status: CsrObject["status"], labels?: Record<string, string>): Promise<void> => {
    const c = await hubClientCsr(name, labels ? { labels } : {});
    hub.csrs.set(name, status ? { ...c, status } : c);
  };
  // Ours, approved by us an hour ago, issued (a manager that started later: the approval time counts).
  await put("addon-mc1-cluster-proxy-old", issuedBy(APPROVAL_REASON, longAgo));
  // Ours, approved by us 30 s ago: not yet.
  await put("addon-mc1-cluster-proxy-new", issuedBy(APPROVAL_REASON, recently));
  // Approved by someone else (an administrator, or the Go addon manager): not ours to delete.
  await put("addon-mc1-cluster-proxy-admin", issuedBy("AutoApprovedByHubCSRApprovingController", longAgo));
  // Another addon's, and the cluster's own registration CSR, issued long ago with our reason.
  await put("addon-mc1-other-x", issuedBy(APPROVAL_REASON, longAgo), {
    [CLUSTER_NAME_LABEL]: "mc1",
    "open-cluster-management.io/addon-name": "other",
  });
  await put("mc1-abcde", issuedBy(APPROVAL_REASON, longAgo), { [CLUSTER_NAME_LABEL]: "mc1" });
  // Denied, or approved by us but never issued: left for kube-controller-manager's cleaner.
  await put("addon-mc1-cluster-proxy-denied", {
    conditions: [{ type: "Denied", status: "True", reason: "ClusterProxyIdentityMismatch", lastUpdateTime: longAgo }],
  });
  await put("addon-mc1-cluster-proxy-unissued", {
    conditions: [{ type: "Approved", status: "True", reason: APPROVAL_REASON, lastUpdateTime: longAgo }],
  });
  for (const name of [...hub.csrs.keys()]) await reconciler.reconcileCsr(name);
  assert.deepEqual(
    hub.deletes.map((d) => d.name),
    ["addon-mc1-cluster-proxy-old"],
  );
  // Disabled (0): nothing is deleted.
  const off = new CsrReconciler(hub.api, hub.cache, { ...options, csrCleanupAfterMs: 0 }, silentLogger);
  await put("addon-mc1-cluster-proxy-old2", issuedBy(APPROVAL_REASON, longAgo));
  assert.equal(await off.reconcileCsr("addon-mc1-cluster-proxy-old2"), undefined);
  assert.equal(hub.deletes.length, 1);
});

test("a newer request of the same cluster and signer supersedes an issued one at once", async () => {
  const hub = fakeHub();
  const now = Date.parse("2026-01-01T01:00:00Z");
  const options = {
    signerNamespace: "ns",
    signerName: "signer",
    caValidityMs: 1,
    certValidityMs: 1,
    csrCleanupAfterMs: 2 * MINUTE,
    now: () => now,
  };
  const reconciler = new CsrReconciler(hub.api, hub.cache, options, silentLogger);
  const at = (iso: string) => ({ creationTimestamp: iso });
  // Issued 10 s ago (well inside the grace), then the registration agent asked again.
  hub.csrs.set("addon-mc1-cluster-proxy-a", {
    ...(await hubClientCsr("addon-mc1-cluster-proxy-a", at("2026-01-01T00:59:40Z"))),
    status: issuedBy(APPROVAL_REASON, "2026-01-01T00:59:50Z"),
  });
  // Another signer's request of the same cluster, newer: supersedes nothing of this signer.
  const agentSigner = await hubClientCsr("addon-mc1-cluster-proxy-other", at("2026-01-01T00:59:55Z"));
  hub.csrs.set("addon-mc1-cluster-proxy-other", {
    ...agentSigner,
    spec: { ...agentSigner.spec, signerName: "open-cluster-management.io/proxy-agent-signer" },
  });
  assert.ok(((await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"))?.requeueAfterMs ?? 0) > 0);
  assert.equal(hub.deletes.length, 0);
  // The same second is not newer (a tie supersedes nothing).
  hub.csrs.set(
    "addon-mc1-cluster-proxy-b",
    await hubClientCsr("addon-mc1-cluster-proxy-b", at("2026-01-01T00:59:40Z")),
  );
  await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a");
  assert.equal(hub.deletes.length, 0);
  // A newer one, still pending: the issued one goes at once; the newer one stays.
  hub.csrs.set(
    "addon-mc1-cluster-proxy-c",
    await hubClientCsr("addon-mc1-cluster-proxy-c", at("2026-01-01T00:59:59Z")),
  );
  assert.equal(await reconciler.reconcileCsr("addon-mc1-cluster-proxy-a"), undefined);
  assert.deepEqual(
    hub.deletes.map((d) => d.name),
    ["addon-mc1-cluster-proxy-a"],
  );
  // Approved by someone else: never deleted, superseded or not.
  hub.csrs.set("addon-mc1-cluster-proxy-admin", {
    ...(await hubClientCsr("addon-mc1-cluster-proxy-admin", at("2026-01-01T00:00:00Z"))),
    status: issuedBy("AutoApprovedByHubCSRApprovingController", "2026-01-01T00:00:01Z"),
  });
  await reconciler.reconcileCsr("addon-mc1-cluster-proxy-admin");
  assert.equal(hub.deletes.length, 1);
});

test("reinstall after reinstall: the count of the addon's CSRs stays far below OCM's limit", async () => {
  // Ten install cycles 30 s apart, each with a new request of the hub client signer (an install
  // makes one per signer; the rule is per signer), issued at once: every new request supersedes
  // the earlier issued one, so at most two exist at any time (the grace of two minutes alone
  // would let four pile up per signer, eight for an install's two).
  const hub = fakeHub();
  let now = Date.parse("2026-01-01T00:00:00Z");
  const options = {
    signerNamespace: "ns",
    signerName: "signer",
    caValidityMs: 1,
    certValidityMs: 1,
    csrCleanupAfterMs: 2 * MINUTE,
    now: () => now,
  };
  let maxCount = 0;
  for (let cycle = 0; cycle < 10; cycle++) {
    // A new manager each cycle (helm uninstall removes it too): it remembers nothing.
    const reconciler = new CsrReconciler(hub.api, hub.cache, options, silentLogger);
    const name = `addon-mc1-cluster-proxy-${cycle}`;
    hub.csrs.set(name, await hubClientCsr(name, { creationTimestamp: new Date(now).toISOString() }));
    maxCount = Math.max(maxCount, hub.csrs.size);
    // The manager's watch queues every CSR of the cluster on a CSR's event.
    for (const other of [...hub.csrs.keys()]) await reconciler.reconcileCsr(other);
    issue(hub.csrs, name);
    maxCount = Math.max(maxCount, hub.csrs.size);
    for (let tick = 0; tick < 3; tick++) {
      now += 10_000;
      for (const name of [...hub.csrs.keys()]) await reconciler.reconcileCsr(name);
    }
  }
  assert.ok(maxCount <= 2 && maxCount < OCM_ADDON_CSR_LIMIT, `at most ${maxCount} CSRs existed at once`);
});
