import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import { AddonReconciler, type AddonCache, type ManagedClusterAddOn } from "./addon-reconciler.js";
import type { KubeApi } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { Resources } from "./resources.js";

/** The manager's resources; Open Cluster Management's have a status subresource. */
const SERVED = Object.values(Resources).map((r) =>
  r.apiVersion.includes("open-cluster-management.io") ? { ...r, subresources: ["status"] } : r,
);
import type { TunnelProber } from "./tunnel-prober.js";
import { silentLogger } from "@cluster-proxy/kit";

/**
 * The faithful fake API server for the addon reconcile (closed after the test): `seed` stores the addon
 * (the cache reads it back, so conditional patches see its resourceVersion); Secrets and every
 * merge patch are read back from the server.
 */
async function addonApi(t: TestContext): Promise<{
  api: KubeApi;
  server: FakeApiServer;
  secrets: { size: number; keys: () => string[] };
  patches: () => { plural: string; body: unknown }[];
}> {
  const server = await FakeApiServer.start(SERVED);
  t.after(() => server.close());
  const secretKeys = (): string[] =>
    server.objects(Resources.secret).map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
  return {
    api: server.api(),
    server,
    secrets: {
      get size() {
        return secretKeys().length;
      },
      keys: secretKeys,
    },
    patches: () =>
      server.requests
        .filter((r) => r.method === "PATCH" && r.contentType === "application/merge-patch+json")
        .map((r) => {
          const parts = r.path.split("/");
          return { plural: parts[parts.indexOf("namespaces") + 2] ?? parts.at(-2) ?? "", body: r.body };
        }),
  };
}

const ownedAddon = (annotations: Record<string, string> = {}): ManagedClusterAddOn => ({
  apiVersion: "addon.open-cluster-management.io/v1alpha1",
  kind: "ManagedClusterAddOn",
  metadata: {
    name: "cluster-proxy",
    namespace: "mc1",
    uid: "u1",
    resourceVersion: "7",
    annotations,
    ownerReferences: [
      {
        apiVersion: "addon.open-cluster-management.io/v1alpha1",
        kind: "ClusterManagementAddOn",
        name: "cluster-proxy",
        uid: "c",
      },
    ],
  },
});

const addonOptions = {
  signerNamespace: "ns",
  signerName: "signer",
  caValidityMs: 86_400_000,
  certValidityMs: 86_400_000,
};

/** A cache that reads the addon from `server` (when stored) and knows mc1's ManagedCluster. */
function addonCache(server: FakeApiServer, mca: ManagedClusterAddOn | undefined): AddonCache {
  return {
    addon: () => (mca ? (server.object(Resources.managedClusterAddOn, mca.metadata.name, "mc1") ?? mca) : undefined),
    cluster: (name) => ({
      apiVersion: "cluster.open-cluster-management.io/v1",
      kind: "ManagedCluster",
      metadata: { name },
    }),
    work: () => undefined,
    configuration: () => undefined,
    deploymentConfig: () => undefined,
    managementAddOn: () => undefined,
    csr: () => undefined,
  };
}

type StatusPatch = {
  status: { conditions?: { type: string; status: string; reason: string }[]; [k: string]: unknown };
};

test("addon reconcile: an addon not owned by the ClusterManagementAddOn, or deleted, is left alone", async (t) => {
  const { api, server, secrets, patches } = await addonApi(t);
  const unowned: ManagedClusterAddOn = { ...ownedAddon(), metadata: { ...ownedAddon().metadata, ownerReferences: [] } };
  assert.equal(
    await new AddonReconciler(
      api,
      addonCache(server, server.put(Resources.managedClusterAddOn, unowned)),
      addonOptions,
      silentLogger,
    ).reconcile("mc1"),
    undefined,
  );
  assert.equal(
    await new AddonReconciler(api, addonCache(server, undefined), addonOptions, silentLogger).reconcile("mc1"),
    undefined,
  );
  assert.equal(patches().length, 0);
  assert.equal(secrets.size, 0);
});

test("addon reconcile: Hosted mode is refused with RegistrationApplied=False, before any CA or work", async (t) => {
  const { api, server, secrets, patches } = await addonApi(t);
  const mca = server.put(
    Resources.managedClusterAddOn,
    ownedAddon({ "addon.open-cluster-management.io/hosting-cluster-name": "hosting" }),
  );
  await new AddonReconciler(api, addonCache(server, mca), addonOptions, silentLogger).reconcile("mc1");
  assert.equal(secrets.size, 0, "no agent CA made");
  assert.equal(patches().length, 1);
  const { status } = patches()[0]!.body as StatusPatch;
  assert.deepEqual(Object.keys(status), ["conditions"]);
  assert.deepEqual(
    status.conditions?.map((c) => [c.type, c.status, c.reason]),
    [["RegistrationApplied", "False", "HostedModeUnsupported"]],
  );
});

test("addon reconcile: without its configuration the addon is registered, ManifestApplied=False, and looked at again in 5 s", async (t) => {
  const { api, server, secrets, patches } = await addonApi(t);
  const mca = server.put(Resources.managedClusterAddOn, ownedAddon());
  const result = await new AddonReconciler(api, addonCache(server, mca), addonOptions, silentLogger).reconcile("mc1");
  assert.deepEqual(result, { requeueAfterMs: 5_000 });
  assert.deepEqual(secrets.keys(), ["ns/signer-agent"], "the agent CA is made for the registration");
  assert.equal(patches().length, 1);
  assert.equal(patches()[0]!.plural, "managedclusteraddons");
  const { status } = patches()[0]!.body as StatusPatch & {
    status: { registrations: { signerName: string }[]; namespace: string; healthCheck: unknown };
  };
  assert.deepEqual(
    status.registrations.map((r) => r.signerName),
    ["open-cluster-management.io/proxy-agent-signer"],
  );
  assert.equal(status.namespace, "open-cluster-management-cluster-proxy");
  assert.deepEqual(status.healthCheck, { mode: "Customized" });
  assert.deepEqual(
    status.conditions?.map((c) => [c.type, c.status, c.reason]),
    [
      ["RegistrationApplied", "True", "SetPermissionApplied"],
      ["ManifestApplied", "False", "ManifestWorkApplyFailed"],
      ["Available", "Unknown", status.conditions?.[2]?.reason ?? ""],
    ],
  );
});

test("addon reconcile: OCM's ClusterCertificateRotated=False and the count of the cluster's CSRs reach Available's message", async (t) => {
  const { api, server, patches } = await addonApi(t);
  const mca = ownedAddon();
  mca.status = {
    conditions: [
      {
        type: "ClusterCertificateRotated",
        status: "False",
        reason: "ClientCertificateUpdateFailed",
        message: "Stop creating csr since there are too many csr created already on hub",
        lastTransitionTime: "2026-01-01T00:00:00Z",
      },
    ],
  };
  server.put(Resources.managedClusterAddOn, mca);
  const cache: AddonCache = { ...addonCache(server, mca), csrCount: (cluster) => (cluster === "mc1" ? 10 : 0) };
  const prober = {
    track: () => undefined,
    untrack: () => undefined,
    now: () => 1_000,
    result: () => ({ probes: [{ server: "s1", address: "10.0.0.1", ok: false, error: "no agent available" }] }),
  } as unknown as TunnelProber;
  await new AddonReconciler(api, cache, addonOptions, silentLogger, prober).reconcile("mc1");
  const { status } = patches()[0]!.body as {
    status: { conditions: { type: string; status: string; message: string }[] };
  };
  const available = status.conditions.find((c) => c.type === "Available");
  assert.equal(available?.status, "False");
  assert.match(
    available?.message ?? "",
    /ClusterCertificateRotated=False \(ClientCertificateUpdateFailed\): Stop creating csr since there are too many csr created already on hub \(10 certificate requests of the addon for mc1 on the hub; OCM's registration agent stops requesting at 10\)/,
  );
  assert.ok(
    status.conditions.some((c) => c.type === "ClusterCertificateRotated" && c.status === "False"),
    "OCM's condition is kept",
  );
});
