import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import {
  ACCESS_PROVIDER_NAME,
  ClusterProfileReconciler,
  ClusterProfileResource,
  EXEC_EXTENSION,
  PROFILE_UPDATE_FAILED,
  accessProviderPatch,
  desiredAccessProvider,
  profileCluster,
  type AccessProvider,
  type ClusterProfile,
  type ClusterProfileCache,
} from "./cluster-profile-reconciler.js";
import { EventRecorder } from "@cluster-proxy/kube";
import { KubeResources } from "@cluster-proxy/kube";
import { FakeApiServer, type FakeRequest } from "@cluster-proxy/kube/testing";
import { silentLogger } from "@cluster-proxy/kit";

const CA1 = "-----BEGIN CERTIFICATE-----\nCA1\n-----END CERTIFICATE-----\n";
const CA2 = "-----BEGIN CERTIFICATE-----\nCA2\n-----END CERTIFICATE-----\n";
const GW = "https://cluster-proxy-addon-user.open-cluster-management-addon.svc:9092";
const other: AccessProvider = { name: "open-cluster-management", cluster: { server: "https://elsewhere:6443" } };

const profile = (cluster: string, status: ClusterProfile["status"] = {}, manager = "open-cluster-management") => ({
  apiVersion: "multicluster.x-k8s.io/v1alpha1",
  kind: "ClusterProfile",
  metadata: {
    name: cluster,
    namespace: "fleet",
    uid: "u-1",
    resourceVersion: "7",
    labels: { "x-k8s.io/cluster-manager": manager, "open-cluster-management.io/cluster-name": cluster },
  },
  status,
});

test("the entry names the gateway path of the cluster, the serving CA bundle and the cluster for the plugin", () => {
  const p = desiredAccessProvider("mc1", { url: `${GW}/`, caBundle: CA1 });
  assert.deepEqual(p, {
    name: ACCESS_PROVIDER_NAME,
    cluster: {
      server: `${GW}/mc1`,
      "certificate-authority-data": Buffer.from(CA1).toString("base64"),
      extensions: [{ name: EXEC_EXTENSION, extension: { cluster: "mc1" } }],
    },
  });
});

test("only OCM's profiles with a cluster-name label are ours to look at", () => {
  assert.equal(profileCluster(profile("mc1")), "mc1");
  assert.equal(profileCluster(profile("mc1", {}, "someone-else")), undefined);
  const unlabelled = profile("mc1");
  delete (unlabelled.metadata.labels as Record<string, string>)["open-cluster-management.io/cluster-name"];
  assert.equal(profileCluster(unlabelled), undefined);
});

test("the patch writes both lists, keeps other providers' entries in place, and is conditional", () => {
  const desired = desiredAccessProvider("mc1", { url: GW, caBundle: CA1 });
  const patch = accessProviderPatch(profile("mc1", { accessProviders: [other], conditions: [] }), desired);
  assert.deepEqual(patch, {
    metadata: { uid: "u-1", resourceVersion: "7" },
    status: { accessProviders: [other, desired], credentialProviders: [desired] },
  });
  // Already there: nothing to write.
  assert.equal(
    accessProviderPatch(profile("mc1", { accessProviders: [desired, other], credentialProviders: [desired] }), desired),
    undefined,
  );
  // A rotated CA replaces our entry where it stands.
  const rotated = desiredAccessProvider("mc1", { url: GW, caBundle: CA2 });
  assert.deepEqual(
    accessProviderPatch(profile("mc1", { accessProviders: [desired, other], credentialProviders: [desired] }), rotated)
      ?.status,
    { accessProviders: [rotated, other], credentialProviders: [rotated] },
  );
});

test("removing the entry keeps the others and drops a list that becomes empty", () => {
  const ours = desiredAccessProvider("mc2", { url: GW, caBundle: CA1 });
  assert.deepEqual(
    accessProviderPatch(profile("mc2", { accessProviders: [other, ours], credentialProviders: [ours] }), undefined)
      ?.status,
    { accessProviders: [other], credentialProviders: null },
  );
  assert.equal(accessProviderPatch(profile("mc2", { accessProviders: [other] }), undefined), undefined);
});

interface Call {
  name: string;
  namespace: string | undefined;
  patch: Record<string, unknown>;
  subresource: string;
}

/**
 * The reconciler on the faithful fake API server (closed after the test): the profile is stored
 * there (the cache reads it), every merge patch is read back from the request log, and Events are
 * real Event objects.
 */
async function harness(t: TestContext, state: { addon: boolean; ca?: string }) {
  const server = await FakeApiServer.start([{ ...ClusterProfileResource, subresources: ["status"] }]);
  t.after(() => server.close());
  const api = server.api();
  const profiles = {
    set: (_key: string, p: ClusterProfile) => void server.put(ClusterProfileResource, p),
  };
  profiles.set("fleet/mc1", profile("mc1", { accessProviders: [other] }));
  const calls = (): Call[] =>
    server.requests
      .filter((r) => r.method === "PATCH")
      .map((r) => {
        // /apis/<group>/<version>/namespaces/<namespace>/clusterprofiles/<name>[/<subresource>]
        const parts = r.path.split("/");
        const at = parts.indexOf("namespaces");
        return {
          name: parts[at + 3] ?? "",
          namespace: parts[at + 1],
          patch: r.body as Record<string, unknown>,
          subresource: parts[at + 4] ?? "",
        };
      });
  const events = (): { reason: string; message: string }[] =>
    server.objects(KubeResources.event).map((e) => ({ reason: String(e.reason), message: String(e.message) }));
  const cache: ClusterProfileCache = {
    profile: (namespace, name) => server.object(ClusterProfileResource, name, namespace),
    addonInstalled: () => state.addon,
    gatewayNamespace: () => "open-cluster-management-addon",
    gatewayCaBundle: () => state.ca,
  };
  const reconciler = new ClusterProfileReconciler(
    api,
    cache,
    new EventRecorder(api, silentLogger),
    { gatewayUrl: "" },
    silentLogger,
  );
  return { reconciler, calls, events, profiles, server };
}

test("the reconciler writes the status subresource, waits for the gateway's CA, and removes the entry with the addon", async (t) => {
  const state: { addon: boolean; ca?: string } = { addon: true };
  const h = await harness(t, state);
  await h.reconciler.reconcile("fleet/mc1");
  assert.equal(h.calls().length, 0, "no CA bundle yet: nothing true to publish");
  state.ca = CA1;
  await h.reconciler.reconcile("fleet/mc1");
  assert.equal(h.calls().length, 1);
  assert.equal(h.calls()[0]!.subresource, "status");
  const status = h.calls()[0]!.patch.status as { accessProviders: AccessProvider[] };
  assert.deepEqual(status.accessProviders, [other, desiredAccessProvider("mc1", { url: `${GW}`, caBundle: CA1 })]);
  // The addon left mc1: the entry goes, the other provider's stays.
  h.profiles.set("fleet/mc1", profile("mc1", { ...status, credentialProviders: status.accessProviders.slice(1) }));
  state.addon = false;
  await h.reconciler.reconcile("fleet/mc1");
  assert.deepEqual(h.calls()[1]!.patch.status, { accessProviders: [other], credentialProviders: null });
  // A profile gone from the cache is nothing to do.
  await h.reconciler.reconcile("fleet/gone");
  assert.equal(h.calls().length, 2);
});

test("a profile that cannot be updated gets one Warning Event per distinct failure; conflicts are only retried", async (t) => {
  const state: { addon: boolean; ca?: string } = { addon: true, ca: CA1 };
  const h = await harness(t, state);
  const isPatch = (r: FakeRequest): boolean => r.method === "PATCH";
  h.server.failNext(
    2,
    { code: 403, reason: "Forbidden", message: 'clusterprofiles.multicluster.x-k8s.io "mc1" is forbidden' },
    isPatch,
  );
  await assert.rejects(h.reconciler.reconcile("fleet/mc1"), /forbidden/);
  await assert.rejects(h.reconciler.reconcile("fleet/mc1"), /forbidden/);
  assert.equal(h.events().length, 1);
  assert.equal(h.events()[0]!.reason, PROFILE_UPDATE_FAILED);
  assert.match(
    h.events()[0]!.message,
    /cannot write access provider cluster-proxy to ClusterProfile fleet\/mc1: .*forbidden/,
  );
  h.server.failNext(1, { code: 409, reason: "Conflict", message: "the object has been modified" }, isPatch);
  await assert.rejects(h.reconciler.reconcile("fleet/mc1"), /modified/);
  assert.equal(h.events().length, 1, "a conflict is routine");
});
