import assert from "node:assert/strict";
import { test } from "node:test";
import { AddonReconciler, type AddonCache } from "./addon-registration.js";
import type { KubeApi, KubeObject } from "./runtime/kube-api.js";
import { silentLogger } from "@cluster-proxy/kit";

test("the ClusterManagementAddOn is created when missing, by Placement when asked, but not again after it was deleted", async () => {
  const created: KubeObject[] = [];
  const api = {
    create: (_ref: unknown, obj: KubeObject) => {
      created.push(obj);
      return Promise.resolve(obj);
    },
  } as unknown as KubeApi;
  let cma: KubeObject | undefined;
  const cache = { managementAddOn: () => cma } as unknown as AddonCache;
  const options = {
    installPlacement: "open-cluster-management-addon/global",
    signerNamespace: "ns",
    signerName: "signer",
    caValidityMs: 1,
    certValidityMs: 1,
  };
  const reconciler = new AddonReconciler(api, cache, options, silentLogger);
  await reconciler.reconcileManagementAddOn();
  assert.equal(created.length, 1);
  assert.deepEqual((created[0]!.spec as { installStrategy: unknown }).installStrategy, {
    type: "Placements",
    placements: [{ name: "global", namespace: "open-cluster-management-addon" }],
  });
  cma = created[0];
  await reconciler.reconcileManagementAddOn();
  // Deleted by an operator: an uninstall, not drift to repair.
  cma = undefined;
  await reconciler.reconcileManagementAddOn();
  await reconciler.reconcileManagementAddOn();
  assert.equal(created.length, 1, "not recreated while this manager runs");
  // A restarted manager (a new term) creates it again, Manual without a placement.
  await new AddonReconciler(api, cache, { ...options, installPlacement: "" }, silentLogger).reconcileManagementAddOn();
  assert.equal(created.length, 2);
  assert.deepEqual((created[1]!.spec as { installStrategy: unknown }).installStrategy, { type: "Manual" });
});
