/**
 * What a gateway URL addresses (a cluster's kube-apiserver or one of its Services), parsed strictly as
 * the Go addon routes it; anything else refused with a one-line reason.
 * Design: docs/design/gateway.md#the-path-of-one-request
 */
import { clusterNameProblem, isDns1123Label } from "@cluster-proxy/api/cluster-name";

/** A request for the cluster's kube-apiserver. */
export interface KubeTarget {
  kind: "kube";
  cluster: string;
  /** The kube-apiserver path (starting with `/`), as sent. */
  path: string;
  /** The query string with its `?`, or "". */
  query: string;
}

/** A request for a Service of the cluster. */
export interface ServiceTarget {
  kind: "service";
  cluster: string;
  namespace: string;
  service: string;
  scheme: "http" | "https";
  port: number;
  /** The path inside the Service (starting with `/`). */
  path: string;
  query: string;
}

/** What a gateway URL addresses. */
export type RequestTarget = KubeTarget | ServiceTarget;

/** The result of {@link parseRequestTarget}: the target, or why the URL is malformed. */
export type ParsedTarget = { ok: true; target: RequestTarget } | { ok: false; problem: string };

const SERVICE_REF = /^(?:(https?):)?([a-z0-9]([-a-z0-9]*[a-z0-9])?):([0-9]{1,5})$/;

function bad(problem: string): ParsedTarget {
  return { ok: false, problem };
}

/** Why one raw path segment is unsafe to hand on, or undefined. */
function segmentProblem(raw: string): string | undefined {
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    return `malformed percent-encoding in "${raw}"`;
  }
  if (decoded === "." || decoded === "..") return "dot segments are not allowed";
  if (/[/\\]/.test(decoded)) return "encoded slashes and backslashes are not allowed";
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(decoded)) return "control characters are not allowed";
  return undefined;
}

/** Parse a request target (`req.url`). */
export function parseRequestTarget(url: string): ParsedTarget {
  if (!url.startsWith("/")) return bad("the request target must be a path starting with /");
  const q = url.indexOf("?");
  const path = q < 0 ? url : url.slice(0, q);
  const query = q < 0 ? "" : url.slice(q);
  if (path.includes("#")) return bad("a fragment is not allowed");
  const segments = path.slice(1).split("/");
  const cluster = segments[0] ?? "";
  if (cluster === "") return bad("no cluster: use /<cluster>/<kube-api path>");
  const nameProblem = clusterNameProblem(cluster);
  if (nameProblem) return bad(nameProblem);
  const rest = segments.slice(1);
  // "/<cluster>" and "/<cluster>/" are the apiserver's root; an empty segment elsewhere is refused.
  for (let i = 0; i < rest.length; i++) {
    const s = rest[i]!;
    if (s === "" && i !== rest.length - 1) return bad("empty path segments are not allowed");
    const problem = segmentProblem(s);
    if (problem) return bad(problem);
  }
  // api/v1/namespaces/<ns>/services/<ref>/proxy-service/<path>
  const isServicePath = rest[0] === "api" && rest[1] === "v1" && rest[2] === "namespaces" && rest[4] === "services";
  if (isServicePath && rest[6] === "proxy-service") return serviceTarget(cluster, rest, query);
  if (rest.includes("proxy-service") && rest[0] === "api")
    return bad(
      "malformed service path: use /<cluster>/api/v1/namespaces/<ns>/services/<[scheme:]name:port>/proxy-service/<path>",
    );
  return { ok: true, target: { kind: "kube", cluster, path: `/${rest.join("/")}`, query } };
}

function serviceTarget(cluster: string, rest: string[], query: string): ParsedTarget {
  const namespace = rest[3]!;
  if (!isDns1123Label(namespace)) return bad(`"${namespace}" is not a namespace name`);
  const ref = SERVICE_REF.exec(rest[5]!);
  if (!ref) return bad(`"${rest[5]}" is not <[scheme:]name:port> (scheme http or https, port a number)`);
  const port = Number(ref[4]);
  if (port < 1 || port > 65535) return bad(`port ${ref[4]} is not a port number`);
  const scheme = ref[1] === "http" ? "http" : "https";
  return {
    ok: true,
    target: {
      kind: "service",
      cluster,
      namespace,
      service: ref[2]!,
      scheme,
      port,
      path: `/${rest.slice(7).join("/")}`,
      query,
    },
  };
}
