/**
 * The gateway's side of the aggregated path (docs/design/gateway.md, "The aggregated path"):
 * request targets under `/apis/<group>/<version>/clusters/<cluster>/proxy` are the gateway's own
 * `/<cluster>` targets, and the discovery documents the hub apiserver asks for (to mark the
 * APIService available and to list the group) are answered without credentials: they name only
 * the group, version and resource, which the APIService publishes anyway. The OpenAPI documents the
 * hub apiserver polls for every aggregated API (`/openapi/v2`, `/openapi/v3...`) are answered 404
 * without credentials: the gateway publishes none, and the hub reads 404 as "no schema", where a
 * cluster route would cost a review and an audit record per poll.
 */
import { GATEWAY_API_GROUP, GATEWAY_API_RESOURCE, GATEWAY_API_ROOT, GATEWAY_API_VERSION } from "@cluster-proxy/api";

const CLUSTERS_PREFIX = `${GATEWAY_API_ROOT}/${GATEWAY_API_RESOURCE}/`;

/**
 * The gateway target of an aggregated URL (`/<cluster><rest>`), `undefined` when `url` is not under
 * the aggregated clusters path, or `{ problem }` when it is but names no `proxy` subresource.
 */
export function fromAggregatedUrl(url: string): string | { problem: string } | undefined {
  if (!url.startsWith(CLUSTERS_PREFIX)) return undefined;
  const rest = url.slice(CLUSTERS_PREFIX.length);
  const m = /^([^/?#]+)\/proxy(?=$|[/?])(.*)$/s.exec(rest);
  if (!m) return { problem: `only ${CLUSTERS_PREFIX}<cluster>/proxy/<kube-api path> is served` };
  const tail = m[2]!;
  return `/${m[1]!}${tail === "" || tail.startsWith("?") ? "/" + tail : tail}`;
}

const versionDiscovery = {
  kind: "APIResourceList",
  apiVersion: "v1",
  groupVersion: `${GATEWAY_API_GROUP}/${GATEWAY_API_VERSION}`,
  resources: [
    { name: GATEWAY_API_RESOURCE, singularName: "cluster", namespaced: false, kind: "Cluster", verbs: [] },
    {
      name: `${GATEWAY_API_RESOURCE}/proxy`,
      singularName: "",
      namespaced: false,
      kind: "Cluster",
      verbs: ["create", "delete", "get", "patch", "update"],
    },
  ],
};

const groupDiscovery = {
  kind: "APIGroup",
  apiVersion: "v1",
  name: GATEWAY_API_GROUP,
  versions: [{ groupVersion: `${GATEWAY_API_GROUP}/${GATEWAY_API_VERSION}`, version: GATEWAY_API_VERSION }],
  preferredVersion: { groupVersion: `${GATEWAY_API_GROUP}/${GATEWAY_API_VERSION}`, version: GATEWAY_API_VERSION },
};

/** The discovery document at `path` (no query), or undefined when `path` is not one. */
export function discoveryDocument(path: string): object | undefined {
  const p = path.endsWith("/") ? path.slice(0, -1) : path;
  if (p === GATEWAY_API_ROOT) return versionDiscovery;
  if (p === `/apis/${GATEWAY_API_GROUP}`) return groupDiscovery;
  return undefined;
}

/** Whether `path` (no query) is one of the OpenAPI documents the hub apiserver polls (answered 404). */
export function isOpenApiPath(path: string): boolean {
  return path === "/openapi/v2" || path === "/openapi/v3" || path.startsWith("/openapi/v3/");
}
