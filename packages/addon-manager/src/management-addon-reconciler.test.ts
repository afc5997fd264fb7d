import assert from "node:assert/strict";
import { test } from "node:test";
import { ADDON_NAME } from "@cluster-proxy/api";
import type { KubeObject } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { silentLogger } from "@cluster-proxy/kit";
import { ManagementAddOnReconciler, type ManagementAddOnCache } from "./management-addon-reconciler.js";
import { Resources } from "./resources.js";

test("the ClusterManagementAddOn is created when missing, by Placement when asked, but not again after it was deleted", async (t) => {
  const server = await FakeApiServer.start([{ ...Resources.clusterManagementAddOn, subresources: ["status"] }]);
  t.after(() => server.close());
  const api = server.api();
  const created = (): KubeObject[] =>
    server.requests
      .filter((r) => r.method === "POST" && r.path.endsWith("/clustermanagementaddons"))
      .map((r) => r.body as KubeObject);
  const cache: ManagementAddOnCache = {
    configuration: () => undefined,
    deploymentConfig: () => undefined,
    managementAddOn: () => server.object(Resources.clusterManagementAddOn, ADDON_NAME),
  };
  const options = { installPlacement: "open-cluster-management-addon/global" };
  const reconciler = new ManagementAddOnReconciler(api, cache, options, silentLogger);
  await reconciler.reconcile();
  assert.equal(created().length, 1);
  assert.deepEqual((created()[0]!.spec as { installStrategy: unknown }).installStrategy, {
    type: "Placements",
    placements: [{ name: "global", namespace: "open-cluster-management-addon" }],
  });
  await reconciler.reconcile();
  // Deleted by an operator: an uninstall, not drift to repair.
  server.remove(Resources.clusterManagementAddOn, ADDON_NAME);
  await reconciler.reconcile();
  await reconciler.reconcile();
  assert.equal(created().length, 1, "not recreated while this manager runs");
  // A restarted manager (a new term) creates it again, Manual without a placement.
  await new ManagementAddOnReconciler(api, cache, { ...options, installPlacement: "" }, silentLogger).reconcile();
  assert.equal(created().length, 2);
  assert.deepEqual((created()[1]!.spec as { installStrategy: unknown }).installStrategy, { type: "Manual" });
});
