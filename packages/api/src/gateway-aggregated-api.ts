/**
 * The gateway as an aggregated API of the hub kube-apiserver (docs/design/gateway.md, "The
 * aggregated path"): the group, version and resource the chart's APIService registers, the paths
 * the gateway serves under it and the CLI writes into kubeconfigs. A group of its own: the
 * ManagedCluster's group is served by a CRD and cannot be shared with an APIService.
 */

/** The API group the gateway serves through the hub apiserver. */
export const GATEWAY_API_GROUP = "gateway.proxy.open-cluster-management.io";
/** Its one version. */
export const GATEWAY_API_VERSION = "v1alpha1";
/** The resource, one object per ManagedCluster; only its `proxy` subresource is served. */
export const GATEWAY_API_RESOURCE = "clusters";

/** `/apis/<group>/<version>`: the discovery document of the group version. */
export const GATEWAY_API_ROOT = `/apis/${GATEWAY_API_GROUP}/${GATEWAY_API_VERSION}`;

/**
 * The path under the hub apiserver that reaches `cluster`'s kube-apiserver through the gateway
 * (no trailing slash): `<hub server><this>/api/v1/namespaces` lists the cluster's namespaces.
 */
export function aggregatedClusterPath(cluster: string): string {
  return `${GATEWAY_API_ROOT}/${GATEWAY_API_RESOURCE}/${cluster}/proxy`;
}
