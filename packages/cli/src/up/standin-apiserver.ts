/**
 * The stand-in kube-apiserver `cluster-proxy up` runs per demo cluster, so `kubectl` can be tried without
 * Kubernetes; it shares the cluster's loopback port with the sample service (TLS first bytes pick it).
 * Guide: docs/guides/hub-operations.md#cluster-proxy-up-trying-kubectl-without-kubernetes
 */
import { access, mkdir, writeFile } from "node:fs/promises";
import type http from "node:http";
import https from "node:https";
import type net from "node:net";
import type { Duplex } from "node:stream";
import { isWebSocketExec, serveWebSocketExec } from "./standin-exec.js";
import { join } from "node:path";

/** The stand-in's certificate and the token it accepts. */
export interface StandinOptions {
  cluster: string;
  cert: string;
  key: string;
  token: string;
}

const json = (res: http.ServerResponse, status: number, body: unknown): void => {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
};

const status = (code: number, reason: string, message: string): Record<string, unknown> => ({
  kind: "Status",
  apiVersion: "v1",
  metadata: {},
  status: "Failure",
  message,
  reason,
  code,
});

/** The namespaces of the demo cluster. */
export function demoNamespaces(cluster: string, created: string): Record<string, unknown>[] {
  return ["default", "kube-system", `${cluster}-apps`].map((name) => ({
    kind: "Namespace",
    apiVersion: "v1",
    metadata: { name, uid: `${cluster}-${name}`, resourceVersion: "1", creationTimestamp: created },
    spec: { finalizers: ["kubernetes"] },
    status: { phase: "Active" },
  }));
}

/** The request handler of the stand-in apiserver of `cluster`. */
export function standinHandler(options: StandinOptions): http.RequestListener {
  const created = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  const namespaces = demoNamespaces(options.cluster, created);
  return (req, res) => {
    req.resume();
    const url = new URL(req.url ?? "/", "https://kubernetes.default.svc");
    const path = url.pathname.replace(/\/+$/, "") || "/";
    if (["/healthz", "/readyz", "/livez"].includes(path)) {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok");
      return;
    }
    if (req.headers.authorization !== `Bearer ${options.token}`) {
      json(res, 401, status(401, "Unauthorized", "Unauthorized"));
      return;
    }
    if (path === "/version") {
      json(res, 200, { major: "1", minor: "36", gitVersion: "v1.36.0-cluster-proxy-standin", platform: "demo" });
    } else if (path === "/api") {
      json(res, 200, { kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [] });
    } else if (path === "/apis") {
      json(res, 200, { kind: "APIGroupList", apiVersion: "v1", groups: [] });
    } else if (path === "/api/v1") {
      json(res, 200, {
        kind: "APIResourceList",
        groupVersion: "v1",
        resources: [
          {
            name: "namespaces",
            singularName: "namespace",
            namespaced: false,
            kind: "Namespace",
            verbs: ["get", "list", "watch"],
            shortNames: ["ns"],
          },
          { name: "pods", singularName: "pod", namespaced: true, kind: "Pod", verbs: ["get"], shortNames: ["po"] },
          { name: "pods/exec", singularName: "", namespaced: true, kind: "PodExecOptions", verbs: ["create", "get"] },
          {
            name: "pods/attach",
            singularName: "",
            namespaced: true,
            kind: "PodAttachOptions",
            verbs: ["create", "get"],
          },
          {
            name: "pods/portforward",
            singularName: "",
            namespaced: true,
            kind: "PodPortForwardOptions",
            verbs: ["create", "get"],
          },
        ],
      });
    } else if (path === "/api/v1/namespaces" && url.searchParams.get("watch") === "true") {
      // A watch: the current objects as ADDED, then the stream stays open until the client goes.
      res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" });
      for (const ns of namespaces) res.write(`${JSON.stringify({ type: "ADDED", object: ns })}\n`);
    } else if (path === "/api/v1/namespaces") {
      const list = { kind: "NamespaceList", apiVersion: "v1", metadata: { resourceVersion: "1" }, items: namespaces };
      json(res, 200, /as=Table/.test(req.headers.accept ?? "") ? namespaceTable(namespaces) : list);
    } else if (path === `/api/v1/namespaces/default/pods/${SAMPLE_POD}`) {
      json(res, 200, samplePod(options.cluster, created));
    } else if (STREAMING.test(path)) {
      json(res, 400, status(400, "BadRequest", streamingMessage(options.cluster, path)));
    } else if (path.startsWith("/api/v1/namespaces/")) {
      const ns = namespaces.find((n) => (n.metadata as { name: string }).name === path.split("/")[4]);
      if (ns) json(res, 200, ns);
      else json(res, 404, status(404, "NotFound", `namespaces "${path.split("/")[4]}" not found`));
    } else {
      json(res, 404, status(404, "NotFound", "the server could not find the requested resource (stand-in apiserver)"));
    }
  };
}

/** The one pod of a demo cluster: what `kubectl exec` and `kubectl port-forward` look up first. */
export const SAMPLE_POD = "sample";

/** The streaming subresources (their requests upgrade to WebSocket or SPDY). */
const STREAMING = /^\/api\/v1\/namespaces\/[^/]+\/pods\/[^/]+\/(exec|attach|portforward)$/;

/** What the stand-in answers an exec, attach or port-forward request of `path` with. */
export function streamingMessage(cluster: string, path: string): string {
  const what = STREAMING.exec(path)?.[1] ?? "streaming";
  return `${what} reached the stand-in kube-apiserver of cluster ${cluster} through the hub, but the stand-in runs no containers: only exec over WebSocket is played (cluster-proxy up demo)`;
}

function samplePod(cluster: string, created: string): Record<string, unknown> {
  return {
    kind: "Pod",
    apiVersion: "v1",
    metadata: {
      name: SAMPLE_POD,
      namespace: "default",
      uid: `${cluster}-pod-${SAMPLE_POD}`,
      resourceVersion: "1",
      creationTimestamp: created,
    },
    spec: { containers: [{ name: SAMPLE_POD, image: "cluster-proxy-up/sample", ports: [{ containerPort: 80 }] }] },
    status: {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
      containerStatuses: [
        {
          name: SAMPLE_POD,
          ready: true,
          started: true,
          restartCount: 0,
          image: "cluster-proxy-up/sample",
          imageID: "",
          state: { running: { startedAt: created } },
        },
      ],
    },
  };
}

/**
 * Answer an upgrade request on `socket`: without the token 401; an exec over WebSocket runs in
 * the pretend container (standin-exec.ts); anything else (attach, port-forward, SPDY) gets a 400
 * Status naming what reached the stand-in.
 */
export function standinUpgrade(
  options: StandinOptions,
): (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (req, socket, head) => {
    const path = new URL(req.url ?? "/", "https://kubernetes.default.svc").pathname;
    const authorized = req.headers.authorization === `Bearer ${options.token}`;
    socket.on("error", () => undefined);
    if (authorized && STREAMING.test(path) && isWebSocketExec(req, path)) {
      serveWebSocketExec(req, socket, head).catch(() => socket.destroy());
      return;
    }
    const body = JSON.stringify(
      authorized
        ? status(400, "BadRequest", streamingMessage(options.cluster, path))
        : status(401, "Unauthorized", "Unauthorized"),
    );
    socket.end(
      `HTTP/1.1 ${authorized ? "400 Bad Request" : "401 Unauthorized"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  };
}

function namespaceTable(namespaces: Record<string, unknown>[]): Record<string, unknown> {
  return {
    kind: "Table",
    apiVersion: "meta.k8s.io/v1",
    metadata: { resourceVersion: "1" },
    columnDefinitions: [
      { name: "Name", type: "string", format: "name", description: "Name", priority: 0 },
      { name: "Status", type: "string", format: "", description: "Phase", priority: 0 },
    ],
    rows: namespaces.map((ns) => ({
      cells: [(ns.metadata as { name: string }).name, "Active"],
      object: { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: ns.metadata },
    })),
  };
}

/**
 * Make `server` (the sample HTTP service) hand connections that open with a TLS handshake
 * (first byte 0x16) to a stand-in apiserver. Returns a closer for the HTTPS side.
 */
export function attachStandin(server: net.Server, options: StandinOptions): { close(): void } {
  const apiserver = https.createServer({ cert: options.cert, key: options.key }, standinHandler(options));
  apiserver.on("upgrade", standinUpgrade(options));
  const plain = server.listeners("connection") as ((socket: net.Socket) => void)[];
  server.removeAllListeners("connection");
  server.on("connection", (socket: net.Socket) => {
    socket.once("readable", () => {
      const first = socket.read(1) as Buffer | null;
      if (first) socket.unshift(first);
      if (first?.[0] === 0x16) apiserver.emit("connection", socket);
      else for (const l of plain) l.call(server, socket);
    });
  });
  return {
    close: () => {
      apiserver.closeAllConnections();
      apiserver.close();
    },
  };
}

/** Files of the stand-in apiservers' demo CA and serving certificate. */
export interface StandinCertPaths {
  ca: string;
  cert: string;
  key: string;
}

/**
 * The demo CA and the `kubernetes.default.svc` serving certificate of the stand-in apiservers in
 * `dir` (made once, reused so that kubeconfigs written earlier keep working).
 */
export async function ensureStandinCerts(dir: string): Promise<StandinCertPaths> {
  const paths = {
    ca: join(dir, "apiserver-ca.crt"),
    cert: join(dir, "apiserver.crt"),
    key: join(dir, "apiserver.key"),
  };
  const present = await Promise.all(
    Object.values(paths).map((p) =>
      access(p).then(
        () => true,
        () => false,
      ),
    ),
  );
  if (present.every(Boolean)) return paths;
  const pki = await import("@cluster-proxy/pki");
  const ca = await pki.createCertificateAuthority({ commonName: "cluster-proxy up demo apiserver CA" });
  const leaf = await pki.issueCertificate(ca, {
    commonName: "kubernetes.default.svc",
    dnsNames: ["kubernetes.default.svc", "kubernetes.default", "kubernetes", "localhost"],
    ipAddresses: ["127.0.0.1"],
    usage: "server",
  });
  await mkdir(dir, { recursive: true });
  await writeFile(paths.ca, ca.certPem);
  await writeFile(paths.cert, leaf.certPem);
  await writeFile(paths.key, leaf.keyPem, { mode: 0o600 });
  return paths;
}

/** The bearer token the stand-in apiserver of `cluster` accepts (a demo: it only listens on loopback). */
export const standinToken = (cluster: string): string => `demo-token-${cluster}`;
