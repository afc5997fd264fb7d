// Test helper shared by the addon-manager suites: install the ManagedProxyConfiguration CRD on the
// hub (generated from the schema, as `cluster-proxy manifests crds` prints it) and wait until it serves.
import { managedProxyConfigurationCrd, type Condition } from "@cluster-proxy/api";
import type { KubeApi, KubeObject } from "@cluster-proxy/addon-manager";
import { waitFor } from "../env/exec.js";

const CRD = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  plural: "customresourcedefinitions",
  namespaced: false,
};

export async function installCrd(api: KubeApi): Promise<void> {
  const crd = managedProxyConfigurationCrd();
  await api.apply(CRD, crd as unknown as KubeObject);
  await waitFor("the CRD to be Established", 60_000, async () => {
    const live = (await api.get(CRD, crd.metadata.name)) as { status?: { conditions?: Condition[] } };
    return live.status?.conditions?.some((c) => c.type === "Established" && c.status === "True");
  });
}
