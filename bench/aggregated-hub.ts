/**
 * The real hub kube-apiserver of bench/gateway.ts's aggregated path (docs/design/gateway.md, "The
 * aggregated path"): etcd and kube-apiserver (the test environment's binaries, `.cache/k8s-binaries`,
 * never built here) with the front-proxy flags as kubeadm sets them, the gateway registered as the
 * APIService `v1alpha1.gateway.proxy.open-cluster-management.io` (the chart's Service name, port and
 * door ClusterRole), reached with --enable-aggregator-routing at a private address on loopback.
 *
 * The aggregator refuses loopback endpoints, so the bench runs in a network namespace of its own
 * ({@link reexecInOwnNetns}: `unshare --net`, gone with its last process): loopback, which also
 * holds that one private address; no other interface, no route out.
 */
import { execFileSync, spawn } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { existsSync, readdirSync, statSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import * as https from "node:https";
import { join } from "node:path";
import { GATEWAY_API_GROUP, GATEWAY_API_VERSION } from "@cluster-proxy/api";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "@cluster-proxy/pki";
import { freePort, type Harness } from "../test/framework/harness.js";
import type { Proc } from "../test/framework/process.js";
import { waitFor } from "../test/framework/waits.js";
import { REPO } from "./lib.js";

/** The private address the aggregator reaches the gateway at (on loopback of the bench's own namespace). */
export const AGGREGATED_ENDPOINT_IP = "10.203.0.1";
/** Set in the re-executed bench: it runs in its own network namespace. */
const NETNS_ENV = "CP_BENCH_OWN_NETNS";
/** The chart's names: the gateway's namespace, Service and port (charts/cluster-proxy/templates/gateway-apiservice.yaml). */
export const GATEWAY_NAMESPACE = "open-cluster-management-cluster-proxy";
const SERVICE = "cluster-proxy-addon-user";
const SERVICE_PORT = 9092;
/** The name the aggregator verifies the gateway's serving certificate for. */
export const GATEWAY_SERVICE_DNS = `${SERVICE}.${GATEWAY_NAMESPACE}.svc`;
const API_SERVICE = `${GATEWAY_API_VERSION}.${GATEWAY_API_GROUP}`;
/** Common name of the hub's front-proxy client certificate (--requestheader-allowed-names). */
const FRONT_PROXY_CN = "bench-front-proxy";
const ADMIN_TOKEN = "bench-hub-admin-token";

/** The directory holding etcd, kube-apiserver and kubectl, or undefined when the cache has none. */
export function findK8sBinaries(): string | undefined {
  const fromEnv = process.env["CP_K8S_BIN_DIR"];
  const candidates = fromEnv
    ? [fromEnv]
    : (() => {
        const root = join(REPO, ".cache", "k8s-binaries");
        if (!existsSync(root)) return [];
        return readdirSync(root)
          .map((d) => join(root, d, "bin"))
          .filter((d) => existsSync(d))
          .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
      })();
  return candidates.find((d) => ["etcd", "kube-apiserver", "kubectl"].every((b) => existsSync(join(d, b))));
}

/**
 * In the parent: run this same bench again inside a new network namespace (`unshare --net`) and
 * exit with its status; signals are passed on to it by PID. In the child: bring up loopback and
 * {@link AGGREGATED_ENDPOINT_IP} on it, and return.
 */
export async function reexecInOwnNetns(log: (s: string) => void, extraArgs: string[]): Promise<void> {
  if (process.env[NETNS_ENV] === "1") {
    // On loopback (as the test environment holds its host addresses): not every kernel has the
    // dummy device, and the namespace has no other interface.
    for (const args of [
      ["link", "set", "lo", "up"],
      ["addr", "add", `${AGGREGATED_ENDPOINT_IP}/32`, "dev", "lo"],
    ])
      execFileSync("ip", args, { stdio: ["ignore", "ignore", "inherit"] });
    return;
  }
  log("re-running inside a network namespace of its own (unshare --net): loopback and one private address");
  const child = spawn(
    "unshare",
    ["--net", "--", process.execPath, ...process.execArgv, ...process.argv.slice(1), ...extraArgs],
    { stdio: "inherit", env: { ...process.env, [NETNS_ENV]: "1" } },
  );
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const)
    process.on(sig, () => {
      if (child.pid !== undefined) process.kill(child.pid, sig);
    });
  const code = await new Promise<number>((resolve) => {
    child.on("exit", (c, s) => resolve(c ?? (s ? 128 : 1)));
    child.on("error", (e) => {
      log(`unshare --net failed (${e.message}): run as root with util-linux, or pass --no-aggregated`);
      resolve(1);
    });
  });
  process.exit(code);
}

/** The running hub. */
export interface AggregatedHub {
  port: number;
  /** The hub's serving CA (PEM). */
  ca: Buffer;
  apiserver: Proc;
  etcd: Proc;
  /** The aggregator's client certificate (--proxy-client-cert-file): to send as the front proxy without the hub. */
  frontProxyClient: { cert: string; key: string };
  /** `data` of kube-system/extension-apiserver-authentication as the hub published it. */
  extensionAuthentication: Record<string, string>;
  /** Register the gateway listening on `port` (all addresses) as the APIService; resolves once Available. */
  registerGateway(port: number, servingCaPem: Buffer): Promise<void>;
  /** kubectl against the hub as its admin. */
  kubectl(args: string[], input?: string): string;
}

async function writePair(dir: string, base: string, pem: CertificateAndKey): Promise<{ cert: string; key: string }> {
  const p = { cert: join(dir, `${base}.crt`), key: join(dir, `${base}.key`) };
  await writeFile(p.key, pem.keyPem, { mode: 0o600 });
  await writeFile(p.cert, pem.certPem);
  return p;
}

/** Wait (up to `timeoutMs`) for `check`; fails at once, with the output of `procs`, if one of them exits. */
async function waitReady(procs: Proc[], what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const dead = (): Proc | undefined => procs.find((p) => p.child.exitCode !== null || p.child.signalCode !== null);
  await waitFor(
    what,
    async () => {
      const d = dead();
      if (d) throw new Error(`${d.name} exited while waiting for ${what}:\n${d.output().slice(-3000)}`);
      return check();
    },
    timeoutMs,
    250,
  ).catch((e: Error) => {
    throw new Error(`${e.message}\n${procs.map((p) => `${p.name}: ${p.output().slice(-2000)}`).join("\n")}`);
  });
}

function getJson(url: string, ca: Buffer, token: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca, timeout: 5000, headers: { authorization: `Bearer ${token}` } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${url}: timed out`)));
    req.on("error", reject);
  });
}

/**
 * Start etcd and kube-apiserver (through the harness: stopped by PID at the end) in `dir`, the
 * user `user` authenticating with bearer `userToken` (--token-auth-file) and allowed through the
 * door (`clusters/proxy`, as the chart grants system:authenticated); resolves once /readyz answers
 * and the requestheader ConfigMap is published.
 */
export async function startAggregatedHub(
  h: Harness,
  binDir: string,
  dir: string,
  user: string,
  userToken: string,
  opts: { aggregatorHttp1?: boolean } = {},
): Promise<AggregatedHub> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const ca = await createCertificateAuthority({ commonName: "bench-real-hub-ca" });
  const caPaths = await writePair(dir, "ca", ca);
  const serving = await writePair(
    dir,
    "apiserver",
    await issueCertificate(ca, {
      commonName: "kube-apiserver",
      dnsNames: ["localhost"],
      ipAddresses: ["127.0.0.1"],
      usage: "server",
    }),
  );
  const frontProxyCa = await createCertificateAuthority({ commonName: "bench-front-proxy-ca" });
  const fpCa = await writePair(dir, "front-proxy-ca", frontProxyCa);
  const fpClient = await writePair(
    dir,
    "front-proxy-client",
    await issueCertificate(frontProxyCa, { commonName: FRONT_PROXY_CN, usage: "client" }),
  );
  const sa = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const saKey = join(dir, "sa.key");
  const saPub = join(dir, "sa.pub");
  await writeFile(saKey, sa.privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
  await writeFile(saPub, sa.publicKey.export({ type: "spki", format: "pem" }));
  const tokens = join(dir, "tokens.csv");
  await writeFile(
    tokens,
    `${userToken},${user},${user}-uid\n${ADMIN_TOKEN},bench-hub-admin,admin-uid,"system:masters"\n`,
    {
      mode: 0o600,
    },
  );

  const [etcdClient, etcdPeer, port] = [await freePort(), await freePort(), await freePort()];
  const etcd = h.spawnProc("hub-etcd", join(binDir, "etcd"), [
    "--name=hub",
    `--data-dir=${join(dir, "etcd")}`,
    `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
    `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
    `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
    `--initial-cluster=hub=http://127.0.0.1:${etcdPeer}`,
    "--unsafe-no-fsync=true",
    "--log-level=warn",
  ]);
  const apiserver = h.spawnProc(
    "hub-kube-apiserver",
    join(binDir, "kube-apiserver"),
    [
      `--etcd-servers=http://127.0.0.1:${etcdClient}`,
      "--bind-address=127.0.0.1",
      `--secure-port=${port}`,
      `--advertise-address=${AGGREGATED_ENDPOINT_IP}`,
      `--cert-dir=${join(dir, "apiserver-certs")}`,
      `--tls-cert-file=${serving.cert}`,
      `--tls-private-key-file=${serving.key}`,
      `--token-auth-file=${tokens}`,
      // The front proxy, as kubeadm sets it up (test/infra/env/environment.ts does the same).
      `--requestheader-client-ca-file=${fpCa.cert}`,
      `--requestheader-allowed-names=${FRONT_PROXY_CN}`,
      `--proxy-client-cert-file=${fpClient.cert}`,
      `--proxy-client-key-file=${fpClient.key}`,
      "--requestheader-username-headers=X-Remote-User",
      "--requestheader-group-headers=X-Remote-Group",
      "--requestheader-extra-headers-prefix=X-Remote-Extra-",
      // The aggregator dials the endpoint's address (no kube-proxy here to route a ClusterIP).
      "--enable-aggregator-routing=true",
      "--service-cluster-ip-range=10.203.100.0/24",
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      `--service-account-key-file=${saPub}`,
      `--service-account-signing-key-file=${saKey}`,
      "--authorization-mode=RBAC",
      "--v=0",
    ],
    {
      // DISABLE_HTTP2 keeps Kubernetes' client transports (the aggregator's to the gateway among
      // them) on HTTP/1.1: to compare with the HTTP/2 they negotiate by default.
      env: { ...process.env, ...(opts.aggregatorHttp1 ? { DISABLE_HTTP2: "1" } : {}) },
    },
  );
  const caPem = await readFile(caPaths.cert);
  const base = `https://127.0.0.1:${port}`;
  await waitReady(
    [etcd, apiserver],
    "the hub kube-apiserver ready",
    async () => (await getJson(`${base}/readyz`, caPem, ADMIN_TOKEN).catch(() => ({ status: 0 }))).status === 200,
    180_000,
  );
  const kubeconfig = join(dir, "admin.kubeconfig");
  await writeFile(
    kubeconfig,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters: [{name: hub, cluster: {server: " + base + ", certificate-authority: " + caPaths.cert + "}}]",
      `users: [{name: admin, user: {token: ${ADMIN_TOKEN}}}]`,
      "contexts: [{name: hub, context: {cluster: hub, user: admin}}]",
      "current-context: hub",
      "",
    ].join("\n"),
    { mode: 0o600 },
  );
  const kubectl = (args: string[], input?: string): string =>
    execFileSync(join(binDir, "kubectl"), [`--kubeconfig=${kubeconfig}`, "--request-timeout=30s", ...args], {
      encoding: "utf8",
      timeout: 120_000,
      ...(input !== undefined ? { input } : {}),
      stdio: ["pipe", "pipe", "pipe"],
    });
  let extensionAuthentication: Record<string, string> = {};
  await waitReady(
    [etcd, apiserver],
    "kube-system/extension-apiserver-authentication published",
    async () => {
      const r = await getJson(
        `${base}/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication`,
        caPem,
        ADMIN_TOKEN,
      );
      if (r.status !== 200) return false;
      extensionAuthentication = (JSON.parse(r.body) as { data?: Record<string, string> }).data ?? {};
      return (extensionAuthentication["requestheader-client-ca-file"] ?? "") !== "";
    },
    60_000,
  );

  const registerGateway = async (gatewayPort: number, servingCaPem: Buffer): Promise<void> => {
    const objects = [
      { apiVersion: "v1", kind: "Namespace", metadata: { name: GATEWAY_NAMESPACE } },
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: SERVICE, namespace: GATEWAY_NAMESPACE },
        spec: { ports: [{ name: "https", port: SERVICE_PORT, targetPort: gatewayPort, protocol: "TCP" }] },
      },
      {
        apiVersion: "v1",
        kind: "Endpoints",
        metadata: { name: SERVICE, namespace: GATEWAY_NAMESPACE },
        subsets: [
          {
            addresses: [{ ip: AGGREGATED_ENDPOINT_IP }],
            ports: [{ name: "https", port: gatewayPort, protocol: "TCP" }],
          },
        ],
      },
      {
        apiVersion: "discovery.k8s.io/v1",
        kind: "EndpointSlice",
        metadata: {
          name: `${SERVICE}-bench`,
          namespace: GATEWAY_NAMESPACE,
          labels: { "kubernetes.io/service-name": SERVICE },
        },
        addressType: "IPv4",
        endpoints: [{ addresses: [AGGREGATED_ENDPOINT_IP], conditions: { ready: true } }],
        ports: [{ name: "https", port: gatewayPort, protocol: "TCP" }],
      },
      {
        apiVersion: "apiregistration.k8s.io/v1",
        kind: "APIService",
        metadata: { name: API_SERVICE },
        spec: {
          group: GATEWAY_API_GROUP,
          version: GATEWAY_API_VERSION,
          service: { namespace: GATEWAY_NAMESPACE, name: SERVICE, port: SERVICE_PORT },
          caBundle: servingCaPem.toString("base64"),
          groupPriorityMinimum: 1000,
          versionPriority: 15,
        },
      },
      // The chart's door: every authenticated hub user may send to clusters/proxy.
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRole",
        metadata: { name: "cluster-proxy-gateway-door" },
        rules: [
          {
            apiGroups: [GATEWAY_API_GROUP],
            resources: ["clusters/proxy"],
            verbs: ["get", "create", "update", "patch", "delete"],
          },
        ],
      },
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRoleBinding",
        metadata: { name: "cluster-proxy-gateway-door" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-proxy-gateway-door" },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "system:authenticated" }],
      },
    ];
    kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: objects }));
    kubectl(["wait", `apiservice/${API_SERVICE}`, "--for=condition=Available", "--timeout=90s"]);
  };
  return {
    port,
    ca: caPem,
    apiserver,
    etcd,
    frontProxyClient: fpClient,
    extensionAuthentication,
    registerGateway,
    kubectl,
  };
}
