/**
 * The gateway's APIService (docs/design/gateway.md, "The aggregated path"): the chart creates it
 * (so `helm uninstall` removes it) without a CA bundle, which is the manager's to know: the hub
 * apiserver verifies the gateway's serving certificate with the serving CA bundle, the same one
 * as in the `ca.crt` of the gateway's serving Secret, kept here as it rotates.
 */
import { GATEWAY_API_GROUP, GATEWAY_API_VERSION } from "@cluster-proxy/api";
import type { Logger } from "@cluster-proxy/kit";
import { b64 } from "./certificate-authority.js";
import type { KubeApi, KubeObject } from "@cluster-proxy/kube";
import { Resources } from "./resources.js";

/** The APIService's name, as the hub requires: `<version>.<group>`. */
export const GATEWAY_API_SERVICE = `${GATEWAY_API_VERSION}.${GATEWAY_API_GROUP}`;

interface ApiServiceObject extends KubeObject {
  spec?: { caBundle?: string; service?: { namespace?: string } };
}

/**
 * Set the APIService's `spec.caBundle` to `bundlePem` (the serving CA of the configuration whose
 * proxy-servers, and gateway, live in `namespace`) when it differs. Nothing to do when the
 * APIService does not exist (the chart's `gateway.aggregatedApi.enabled` is off) or points at a
 * gateway in another namespace (another configuration's).
 */
export async function publishGatewayApiServiceCa(
  api: KubeApi,
  namespace: string,
  bundlePem: string,
  logger: Logger,
): Promise<void> {
  const current = await api.tryGet<ApiServiceObject>(Resources.apiService, GATEWAY_API_SERVICE);
  if (current?.spec?.service?.namespace !== namespace) return;
  const caBundle = b64(bundlePem);
  if (current.spec?.caBundle === caBundle) return;
  await api.mergePatch(Resources.apiService, GATEWAY_API_SERVICE, undefined, { spec: { caBundle } });
  logger.info({ apiService: GATEWAY_API_SERVICE }, "published the serving CA bundle to the gateway's APIService");
}
