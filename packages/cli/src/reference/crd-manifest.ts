/**
 * The ManagedProxyConfiguration CRD as YAML (`cluster-proxy manifests crds` and the chart's
 * `crds/`), exactly as the API package generates it: its CEL rules (`x-kubernetes-validations`)
 * and `default`s included. (@kubernetes/client-node's `dumpYaml` maps an object through its typed
 * models first, which know these fields by other names, and drops them.)
 */
import { managedProxyConfigurationCrd } from "@cluster-proxy/api";

/** The CRD as one YAML document; shared sub-schemas are written out, never as YAML aliases. */
export async function crdManifestYaml(): Promise<string> {
  const { dump } = await import("js-yaml");
  return dump(managedProxyConfigurationCrd(), { noRefs: true });
}
