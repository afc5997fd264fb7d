import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { certificateRequest } from "@cluster-proxy/pki/testing";
import type { AddonCache, ManagedCluster, ManagedClusterAddOn } from "./addon-reconciler.js";
import { APPROVAL_REASON, CsrReconciler } from "./csr-reconciler.js";
import { ADDON_NAME } from "@cluster-proxy/api";
import { CLUSTER_NAME_LABEL, HUB_CLIENT_SIGNER, OCM_ADDON_CSR_LIMIT, type CsrObject } from "./csr-signer.js";
import type { KubeApi } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { Resources } from "./resources.js";

const SUBJECT = {
  user: "open-cluster-management:cluster-proxy:mc1:hub-client",
  groups: ["open-cluster-management:cluster-proxy:mc1"],
};
const MINUTE = 60_000;

const CSRS = Resources.certificateSigningRequest;

/**
 * A hub for the CSR reconciler: the faithful fake API server holds the CSRs (the watch cache reads
 * it), so approvals, certificates and DELETE preconditions go through the real client; every DELETE
 * is read back from the server's request log.
 */
async function fakeHub(t: TestContext): Promise<{
  api: KubeApi;
  server: FakeApiServer;
  put: (csr: CsrObject) => CsrObject;
  csr: (name: string) => CsrObject | undefined;
  names: () => string[];
  deletes: () => { name: string; preconditions?: { uid?: string; resourceVersion?: string } }[];
  cache: Pick<AddonCache, "cluster" | "addon" | "csr" | "csrsOf">;
}> {
  const server = await FakeApiServer.start();
  t.after(() => server.close());
  const mc: ManagedCluster = {
    apiVersion: "cluster.open-cluster-management.io/v1",
    kind: "ManagedCluster",
    metadata: { name: "mc1" },
    spec: { hubAcceptsClient: true },
  };
  const mca: ManagedClusterAddOn = {
    metadata: { name: ADDON_NAME, namespace: "mc1" },
    status: { registrations: [{ signerName: HUB_CLIENT_SIGNER, subject: SUBJECT }] },
  };
  const csr = (name: string): CsrObject | undefined => server.object<CsrObject>(CSRS, name);
  const cache = {
    cluster: (name: string) => (name === "mc1" ? mc : undefined),
    addon: (cluster: string) => (cluster === "mc1" ? mca : undefined),
    csr,
    csrsOf: (cluster: string) =>
      server.objects<CsrObject>(CSRS).filter((c) => c.metadata.labels?.[CLUSTER_NAME_LABEL] === cluster),
  };
  return {
    api: server.api(),
    server,
    put: (obj) => server.put(CSRS, obj),
    csr,
    names: () => server.objects(CSRS).map((c) => c.metadata.name),
    deletes: () =>
      server.requests
        .filter((r) => r.method === "DELETE")
        .map((r) => {
          const body = r.body as { preconditions?: { uid?: string; resourceVersion?: string } };
          return {
            name: decodeURIComponent(r.path.split("/").pop() ?? ""),
            ...(body.preconditions ? { preconditions: body.preconditions } : {}),
          };
        }),
    cache,
  };
}

/** The reconciler's options: CSRs we approved are deleted two minutes after their certificate. */
const options = {
  signerNamespace: "ns",
  signerName: "signer",
  caValidityMs: 1,
  certValidityMs: 1,
  csrCleanupAfterMs: 2 * MINUTE,
};

/** A clock that stands at `iso` until the test advances it. */
function clockAt(iso: string): ManualClock {
  const clock = new ManualClock();
  clock.advance(Date.parse(iso));
  return clock;
}

/** A reconciler of `hub`'s CSRs reading `cache` (the hub's own unless given), on `clock`. */
const reconcilerOf = (
  hub: Awaited<ReturnType<typeof fakeHub>>,
  clock: ManualClock,
  cache: Awaited<ReturnType<typeof fakeHub>>["cache"] = hub.cache,
): CsrReconciler => new CsrReconciler(hub.api, cache, options, silentLogger, clock);

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
function issue(
  hub: { csr: (name: string) => CsrObject | undefined; put: (csr: CsrObject) => CsrObject },
  name: string,
): void {
  const csr = hub.csr(name)!;
  hub.put({
    ...csr,
    status: { ...csr.status, certificate: Buffer.from("-----BEGIN CERTIFICATE-----").toString("base64") },
  });
}

const issuedBy = (reason: string, at: string): NonNullable<CsrObject["status"]> => ({
  conditions: [{ type: "Approved", status: "True", reason, lastUpdateTime: at }],
  certificate: Buffer.from("cert").toString("base64"),
});

test("a CSR we approved is deleted --csr-cleanup-after its certificate was issued, not before, and only once unchanged", async (t) => {
  const hub = await fakeHub(t);
  const clock = clockAt("2026-01-01T00:00:00Z");
  const reconciler = reconcilerOf(hub, clock);
  hub.put(await hubClientCsr("addon-mc1-cluster-proxy-a"));
  // Pending: approved (kube-controller-manager signs this signer); nothing deleted.
  assert.equal(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), undefined);
  assert.equal(hub.csr("addon-mc1-cluster-proxy-a")?.status?.conditions?.[0]?.reason, APPROVAL_REASON);
  assert.equal(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), undefined);
  // Issued ten minutes after the approval: the grace counts from the issue this process saw.
  clock.advance(10 * MINUTE);
  issue(hub, "addon-mc1-cluster-proxy-a");
  assert.deepEqual(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), { requeueAfterMs: 2 * MINUTE });
  clock.advance(MINUTE);
  assert.deepEqual(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), { requeueAfterMs: MINUTE });
  assert.equal(hub.deletes().length, 0, "not before the grace period");
  // Changed meanwhile (the cache is behind): the precondition refuses, nothing is lost.
  const cached = hub.csr("addon-mc1-cluster-proxy-a")!;
  const stale = { ...cached, metadata: { ...cached.metadata, resourceVersion: "stale" } };
  const cache = { ...hub.cache, csr: (name: string) => (name === cached.metadata.name ? stale : undefined) };
  clock.advance(MINUTE);
  const behind = reconcilerOf(hub, clock, cache);
  // (A fresh process: it did not see the issue, so the approval time counts, 12 minutes ago.)
  assert.equal(await behind.reconcile(cached.metadata.name), undefined);
  assert.ok(hub.csr(cached.metadata.name), "a CSR changed since it was read is not deleted");
  assert.equal(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), undefined);
  assert.equal(hub.csr("addon-mc1-cluster-proxy-a"), undefined, "deleted once the grace period passed");
  assert.deepEqual(hub.deletes().at(-1)?.preconditions, {
    uid: "uid-addon-mc1-cluster-proxy-a",
    resourceVersion: cached.metadata.resourceVersion,
  });
  // Gone from the cache: forgotten, nothing more to do.
  assert.equal(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), undefined);
});

test("only CSRs of the addon that we approved and that are issued are ever deleted", async (t) => {
  const hub = await fakeHub(t);
  const clock = clockAt("2026-01-01T01:00:00Z");
  const reconciler = reconcilerOf(hub, clock);
  const longAgo = "2026-01-01T00:00:00Z";
  const recently = "2026-01-01T00:59:30Z";
  const put = async (name: string, status: CsrObject["status"], labels?: Record<string, string>): Promise<void> => {
    // All created in one second (the fake server would stamp each at its own): none supersedes another.
    const c = await hubClientCsr(name, { creationTimestamp: longAgo, ...(labels ? { labels } : {}) });
    hub.put(status ? { ...c, status } : c);
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
  for (const name of hub.names()) await reconciler.reconcile(name);
  assert.deepEqual(
    hub.deletes().map((d) => d.name),
    ["addon-mc1-cluster-proxy-old"],
  );
  // Disabled (0): nothing is deleted.
  const off = new CsrReconciler(hub.api, hub.cache, { ...options, csrCleanupAfterMs: 0 }, silentLogger, clock);
  await put("addon-mc1-cluster-proxy-old2", issuedBy(APPROVAL_REASON, longAgo));
  assert.equal(await off.reconcile("addon-mc1-cluster-proxy-old2"), undefined);
  assert.equal(hub.deletes().length, 1);
});

test("a newer request of the same cluster and signer supersedes an issued one at once", async (t) => {
  const hub = await fakeHub(t);
  const clock = clockAt("2026-01-01T01:00:00Z");
  const reconciler = reconcilerOf(hub, clock);
  const at = (iso: string) => ({ creationTimestamp: iso });
  // Issued 10 s ago (well inside the grace), then the registration agent asked again.
  hub.put({
    ...(await hubClientCsr("addon-mc1-cluster-proxy-a", at("2026-01-01T00:59:40Z"))),
    status: issuedBy(APPROVAL_REASON, "2026-01-01T00:59:50Z"),
  });
  // Another signer's request of the same cluster, newer: supersedes nothing of this signer.
  const agentSigner = await hubClientCsr("addon-mc1-cluster-proxy-other", at("2026-01-01T00:59:55Z"));
  hub.put({
    ...agentSigner,
    spec: { ...agentSigner.spec, signerName: "open-cluster-management.io/proxy-agent-signer" },
  });
  assert.ok(((await reconciler.reconcile("addon-mc1-cluster-proxy-a"))?.requeueAfterMs ?? 0) > 0);
  assert.equal(hub.deletes().length, 0);
  // The same second is not newer (a tie supersedes nothing).
  hub.put(await hubClientCsr("addon-mc1-cluster-proxy-b", at("2026-01-01T00:59:40Z")));
  await reconciler.reconcile("addon-mc1-cluster-proxy-a");
  assert.equal(hub.deletes().length, 0);
  // A newer one, still pending: the issued one goes at once; the newer one stays.
  hub.put(await hubClientCsr("addon-mc1-cluster-proxy-c", at("2026-01-01T00:59:59Z")));
  assert.equal(await reconciler.reconcile("addon-mc1-cluster-proxy-a"), undefined);
  assert.deepEqual(
    hub.deletes().map((d) => d.name),
    ["addon-mc1-cluster-proxy-a"],
  );
  // Approved by someone else: never deleted, superseded or not.
  hub.put({
    ...(await hubClientCsr("addon-mc1-cluster-proxy-admin", at("2026-01-01T00:00:00Z"))),
    status: issuedBy("AutoApprovedByHubCSRApprovingController", "2026-01-01T00:00:01Z"),
  });
  await reconciler.reconcile("addon-mc1-cluster-proxy-admin");
  assert.equal(hub.deletes().length, 1);
});

test("reinstall after reinstall: the count of the addon's CSRs stays far below OCM's limit", async (t) => {
  // Ten install cycles 30 s apart, each with a new request of the hub client signer (an install
  // makes one per signer; the rule is per signer), issued at once: every new request supersedes
  // the earlier issued one, so at most two exist at any time (the grace of two minutes alone
  // would let four pile up per signer, eight for an install's two).
  const hub = await fakeHub(t);
  const clock = clockAt("2026-01-01T00:00:00Z");
  let maxCount = 0;
  for (let cycle = 0; cycle < 10; cycle++) {
    // A new manager each cycle (helm uninstall removes it too): it remembers nothing.
    const reconciler = reconcilerOf(hub, clock);
    const name = `addon-mc1-cluster-proxy-${cycle}`;
    hub.put(await hubClientCsr(name, { creationTimestamp: new Date(clock.now()).toISOString() }));
    maxCount = Math.max(maxCount, hub.names().length);
    // The manager's watch queues every CSR of the cluster on a CSR's event.
    for (const other of hub.names()) await reconciler.reconcile(other);
    issue(hub, name);
    maxCount = Math.max(maxCount, hub.names().length);
    for (let tick = 0; tick < 3; tick++) {
      clock.advance(10_000);
      for (const name of hub.names()) await reconciler.reconcile(name);
    }
  }
  assert.ok(maxCount <= 2 && maxCount < OCM_ADDON_CSR_LIMIT, `at most ${maxCount} CSRs existed at once`);
});
