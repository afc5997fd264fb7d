/**
 * The Kubernetes view of a kube-apiserver request, derived from method, path and query as the
 * apiserver's RequestInfo does: the verb (get, list, watch, create, update, patch, delete,
 * deletecollection; the lowercased method for non-resource paths) and the resource, subresource,
 * namespace and name. For audit records and metrics only: the decision is the cluster's.
 */

/** What a kube-apiserver request is about. */
export interface KubeRequestInfo {
  verb: string;
  resource?: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  /** The API group ("" for the core group). */
  group?: string;
}

function isTrue(value: string | null): boolean {
  return value === "1" || value === "true";
}

/** The RequestInfo of `method` on `path` (without query) with `query` (with or without `?`). */
export function kubeRequestInfo(method: string, path: string, query: string): KubeRequestInfo {
  const m = method.toUpperCase();
  const params = new URLSearchParams(query.startsWith("?") ? query.slice(1) : query);
  const parts = path.split("/").filter((p) => p !== "");
  let group: string;
  let rest: string[];
  if (parts[0] === "api" && parts.length >= 2) {
    group = "";
    rest = parts.slice(2);
  } else if (parts[0] === "apis" && parts.length >= 3) {
    group = parts[1]!;
    rest = parts.slice(3);
  } else return { verb: m.toLowerCase() };
  let watchPrefix = false;
  if (rest[0] === "watch") {
    watchPrefix = true;
    rest = rest.slice(1);
  }
  const info: KubeRequestInfo = { verb: m.toLowerCase(), group };
  if (rest[0] === "namespaces" && rest.length >= 2) {
    info.namespace = rest[1];
    if (rest.length > 2) rest = rest.slice(2);
    else rest = ["namespaces", rest[1]!];
    if (rest[0] === "namespaces") info.namespace = rest[1];
  }
  if (rest[0]) info.resource = rest[0];
  if (rest[1]) info.name = rest[1];
  if (rest[2]) info.subresource = rest[2];
  switch (m) {
    case "GET":
    case "HEAD":
      info.verb = watchPrefix || isTrue(params.get("watch")) ? "watch" : info.name ? "get" : "list";
      break;
    case "POST":
      info.verb = "create";
      break;
    case "PUT":
      info.verb = "update";
      break;
    case "PATCH":
      info.verb = "patch";
      break;
    case "DELETE":
      info.verb = info.name ? "delete" : "deletecollection";
      break;
  }
  if (!info.resource) info.verb = m.toLowerCase();
  return info;
}
