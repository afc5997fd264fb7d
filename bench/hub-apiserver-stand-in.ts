/**
 * The hub kube-apiserver as the gateway sees it in bench/gateway.ts: an HTTPS server on 127.0.0.1
 * that authenticates every bearer token as one user, allows every access review, knows the given
 * ManagedClusters, and has no ConfigMaps (so the exposed-services allowlist is empty). It does
 * not check who asks: the bench measures the gateway, not the hub.
 *
 *   node --import tsx hub-apiserver-stand-in.ts '{"cert":"...","key":"...","clusters":["bench"],"user":"bench"}'
 *
 * - `POST /apis/authentication.k8s.io/v1/tokenreviews`: authenticated, user `user`, group
 *   `system:authenticated`, the audiences asked for.
 * - `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` (and selfsubjectaccessreviews): allowed.
 * - `GET /apis/cluster.open-cluster-management.io/v1/managedclusters[/<cluster>]`: the clusters.
 * - ConfigMaps: those given in `configMaps` (`"<namespace>/<name>": data`, e.g. the real hub's
 *   kube-system/extension-apiserver-authentication for the aggregated path), any other `GET` of one
 *   is 404, lists hold the given ones (by `metadata.name` field selector), watches stay open and quiet.
 * - `POST` of Events (core or events.k8s.io): accepted.
 * - Anything else: 404, and counted under `unhandled` with its method and path.
 *
 * Prints `{"port":<port>}` on stdout once listening; `GET /_bench/stats` answers {@link HubStats}.
 * Runs until killed or stdin closes.
 */
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import * as https from "node:https";
import type { AddressInfo } from "node:net";

/** What `GET /_bench/stats` answers. */
export interface HubStats {
  tokenReviews: number;
  accessReviews: number;
  managedClusterGets: number;
  configMapRequests: number;
  events: number;
  /** `METHOD path` of requests this stand-in does not know, with how often each came. */
  unhandled: Record<string, number>;
}

const args = JSON.parse(process.argv[2] ?? "{}") as {
  cert: string;
  key: string;
  clusters: string[];
  user: string;
  configMaps?: Record<string, Record<string, string>>;
};
const configMaps = new Map(Object.entries(args.configMaps ?? {}));
const configMap = (namespace: string, name: string): Record<string, unknown> | undefined => {
  const data = configMaps.get(`${namespace}/${name}`);
  return data && { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace, resourceVersion: "1" }, data };
};
const stats: HubStats = {
  tokenReviews: 0,
  accessReviews: 0,
  managedClusterGets: 0,
  configMapRequests: 0,
  events: 0,
  unhandled: {},
};
/** Requests with a body larger than this are refused (reviews are small). */
const MAX_BODY = 1024 * 1024;
/** Quiet watches are ended after this long, as an apiserver ends watches. */
const WATCH_LIFETIME_MS = 15 * 60_000;

const managedCluster = (name: string): Record<string, unknown> => ({
  apiVersion: "cluster.open-cluster-management.io/v1",
  kind: "ManagedCluster",
  metadata: {
    name,
    uid: `0b9c5f8e-1d2a-4c3b-8e4f-${Buffer.from(name).toString("hex").padEnd(12, "0").slice(0, 12)}`,
    resourceVersion: "7",
  },
  spec: { hubAcceptsClient: true },
  status: { conditions: [{ type: "ManagedClusterConditionAvailable", status: "True" }] },
});

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_BODY) throw new Error("body too large");
    chunks.push(c);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

function json(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
}

function notFound(res: ServerResponse, what: string): void {
  json(res, 404, {
    kind: "Status",
    apiVersion: "v1",
    status: "Failure",
    message: `${what} not found`,
    reason: "NotFound",
    code: 404,
  });
}

function quietWatch(res: ServerResponse): void {
  res.writeHead(200, { "content-type": "application/json", "cache-control": "no-cache" });
  res.flushHeaders();
  const end = setTimeout(() => res.end(), WATCH_LIFETIME_MS);
  res.on("close", () => clearTimeout(end));
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", "https://hub");
  const path = url.pathname;
  const method = req.method ?? "GET";
  const watching = ["true", "1"].includes(url.searchParams.get("watch") ?? "");
  if (path === "/_bench/stats") return json(res, 200, stats);

  if (method === "POST" && path === "/apis/authentication.k8s.io/v1/tokenreviews") {
    stats.tokenReviews++;
    const review = await body(req);
    const spec = (review["spec"] ?? {}) as { audiences?: string[] };
    return json(res, 201, {
      ...review,
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenReview",
      status: {
        authenticated: true,
        user: { username: args.user, uid: "bench-uid", groups: ["system:authenticated"] },
        audiences: spec.audiences ?? [],
      },
    });
  }
  if (method === "POST" && /^\/apis\/authorization\.k8s\.io\/v1\/(self)?subjectaccessreviews$/.test(path)) {
    stats.accessReviews++;
    const review = await body(req);
    return json(res, 201, {
      ...review,
      apiVersion: "authorization.k8s.io/v1",
      kind: "SubjectAccessReview",
      status: { allowed: true, reason: "bench" },
    });
  }
  const clusters = "/apis/cluster.open-cluster-management.io/v1/managedclusters";
  if (method === "GET" && (path === clusters || path.startsWith(`${clusters}/`))) {
    stats.managedClusterGets++;
    if (watching) return quietWatch(res);
    if (path === clusters)
      return json(res, 200, {
        apiVersion: "cluster.open-cluster-management.io/v1",
        kind: "ManagedClusterList",
        metadata: { resourceVersion: "7" },
        items: args.clusters.map(managedCluster),
      });
    const name = path.slice(clusters.length + 1);
    return args.clusters.includes(name) ? json(res, 200, managedCluster(name)) : notFound(res, path);
  }
  const cm = /^\/api\/v1\/(?:namespaces\/([^/]+)\/)?configmaps(?:\/([^/]+))?$/.exec(path);
  if (cm) {
    stats.configMapRequests++;
    if (watching) return quietWatch(res);
    const [, namespace = "", name] = cm;
    if (name !== undefined) {
      const found = configMap(namespace, name);
      return found ? json(res, 200, found) : notFound(res, path);
    }
    const only = /^metadata\.name=(.+)$/.exec(url.searchParams.get("fieldSelector") ?? "")?.[1];
    const items = [...configMaps.keys()]
      .map((k) => k.split("/") as [string, string])
      .filter(([ns, n]) => (namespace === "" || ns === namespace) && (only === undefined || n === only))
      .map(([ns, n]) => configMap(ns, n));
    return json(res, 200, { apiVersion: "v1", kind: "ConfigMapList", metadata: { resourceVersion: "1" }, items });
  }
  if (method === "POST" && /^\/(api\/v1|apis\/events\.k8s\.io\/v1)\/namespaces\/[^/]+\/events$/.test(path)) {
    stats.events++;
    return json(res, 201, await body(req));
  }
  const key = `${method} ${path}`;
  stats.unhandled[key] = (stats.unhandled[key] ?? 0) + 1;
  process.stderr.write(`hub stand-in: unhandled ${key}${url.search}\n`);
  return notFound(res, path);
}

const server = https.createServer(
  { cert: readFileSync(args.cert), key: readFileSync(args.key), keepAliveTimeout: 120_000 },
  (req, res) => {
    handle(req, res).catch((err: Error) =>
      json(res, 400, { kind: "Status", status: "Failure", message: err.message, code: 400 }),
    );
  },
);
server.listen({ port: 0, host: "127.0.0.1", backlog: 1024 });
await once(server, "listening");
process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
