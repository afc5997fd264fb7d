/**
 * The gateway's side of the aggregated path: `/apis/<group>/<version>/clusters/<cluster>/proxy` targets
 * as `/<cluster>`, discovery answered without credentials, the hub's OpenAPI polls answered 404.
 * Design: docs/design/gateway.md#the-aggregated-path
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
