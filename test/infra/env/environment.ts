// The multi-cluster test environment: hub, mc1, mc2 (each: etcd + kube-apiserver + kube-controller-manager,
// own PKI, own network namespace), the OCM hub (registration, placement, addon manager, addon
// conversion webhook), an OCM klusterlet agent in each managed cluster, a process kubelet per
// cluster, and a bridge in the lab namespace for clients outside our namespaces.
//
// State: <stateDir>/state.json records every PID and namespace we made; down() stops by those
// (then by `ip netns pids` of our namespaces) and deletes the namespaces and the state dir.
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  AGENT_NAMESPACE,
  ALL_NAMESPACES,
  APISERVER_PORT,
  BOOTSTRAP_USER,
  CLUSTERS,
  type ClusterName,
  HOST_ADDR,
  HUB_NAMESPACE,
  KUBELET_PORT,
  MANAGED,
  NS_PREFIX,
  SERVICE_CIDR,
  apiserverUrl,
  nsOf,
  paths,
  repoRoot,
  stateDir,
} from "./config.js";
import { CommandError, pidAlive, run, runIn, sleep, startDetached, stopPids, waitFor } from "./exec.js";
import {
  checkNetworkPrereqs,
  createNetwork,
  deleteNetwork,
  ensureNft,
  listNamespaces,
  pidsInOurNamespaces,
} from "./network.js";
import { FRONT_PROXY_CLIENT_CN, KUBELET_CLIENT_CN, createPki, kubeconfig, pkiFile } from "./pki.js";
import { errorMessage } from "@cluster-proxy/errors";

export interface ProcRecord {
  name: string;
  ns: string;
  pid: number;
  log: string;
}

export interface EnvState {
  version: 1;
  startedAt: string;
  /** "manual": env:up (stays until env:down); "fixture": a test fixture, which tears it down when done. */
  owner: "manual" | "fixture";
  ownerPid: number;
  binDir: string;
  cacheDir: string;
  namespaces: string[];
  procs: ProcRecord[];
  ready: boolean;
  readySeconds?: number;
  /** OCM's ClusterProfile feature gate is on and the ClusterProfile CRD installed (see {@link EnvOptions}). */
  clusterProfile?: boolean;
}

/** Optional parts of the environment; a running environment without a part asked for is replaced. */
export interface EnvOptions {
  /**
   * SIG-Multicluster ClusterProfiles: the CRD of the `sigs.k8s.io/cluster-inventory-api` version
   * OCM v1.2.1 requires (read from the Go module cache) on the hub, and the registration hub's
   * `ClusterProfile` feature gate on, so OCM keeps a ClusterProfile per ManagedCluster in every
   * namespace with a bound ManagedClusterSetBinding. Also `CPENV_CLUSTER_PROFILE=1`.
   */
  clusterProfile?: boolean;
}

export const log = (msg: string): void => {
  process.stderr.write(`test-env: ${msg}\n`);
};

// ---------------------------------------------------------------- binaries

/**
 * Runs one of the scripts that build Go binaries into a cache (progress on our stderr) and returns
 * the last line it printed (its result directory).
 */
function runBuildScript(script: string, what: string): string {
  let out: string;
  try {
    // The build needs the Go module proxy only on a cold cache; see docs/testing/environment.md for
    // running it from inside a namespace without a route out.
    out = execFileSync(process.execPath, [join(repoRoot, "scripts", script)], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      timeout: 80 * 60_000,
    });
  } catch (err) {
    throw new CommandError(
      `building ${what} failed (node scripts/${script}; see its error above). ` +
        `A cold build needs the Go module proxy: inside a network namespace without a route out (scripts/test.sh's ` +
        `cp-test-<pid>) run 'node --conditions=source --import tsx test/infra/env/cli.ts prepare' first, outside it. ` +
        `${errorMessage(err)}`,
    );
  }
  return out.trim().split("\n").pop() ?? "";
}

/** Runs scripts/k8s-binaries.mjs and returns its cache dir. */
export function buildBinaries(): string {
  const dir = runBuildScript("k8s-binaries.mjs", "the Kubernetes/etcd/OCM binaries");
  if (!dir || !existsSync(join(dir, "bin", "kube-apiserver")))
    throw new CommandError(`k8s-binaries printed no cache dir (${dir})`);
  return dir;
}

/** Runs scripts/helm-binary.mjs and returns the path of the `helm` it built (or found cached). */
export function buildHelm(): string {
  const helm = join(runBuildScript("helm-binary.mjs", "helm"), "helm");
  if (!existsSync(helm)) throw new CommandError(`helm-binary printed no bin dir holding helm (${helm})`);
  return helm;
}

/** Runs scripts/kubelet-api-binary.mjs and returns the path of the `kubelet-api` test peer. */
export function buildKubeletApi(): string {
  const bin = join(runBuildScript("kubelet-api-binary.mjs", "the kubelet-api test peer"), "kubelet-api");
  if (!existsSync(bin)) throw new CommandError(`kubelet-api-binary printed no bin dir holding kubelet-api (${bin})`);
  return bin;
}

/** Runs scripts/clusteradm-binary.mjs and returns the path of the real `clusteradm` (v1.3.1) it built. */
export function buildClusteradm(): string {
  const bin = join(runBuildScript("clusteradm-binary.mjs", "clusteradm"), "clusteradm");
  if (!existsSync(bin)) throw new CommandError(`clusteradm-binary printed no bin dir holding clusteradm (${bin})`);
  return bin;
}

/**
 * Runs scripts/cluster-gateway-binary.mjs and returns the path of KubeVela's cluster-gateway
 * (v1.9.1) it built: the process kubelets run it for the image oamdev/cluster-gateway.
 */
export function buildClusterGateway(): string {
  const bin = join(runBuildScript("cluster-gateway-binary.mjs", "KubeVela's cluster-gateway"), "cluster-gateway");
  if (!existsSync(bin))
    throw new CommandError(`cluster-gateway-binary printed no bin dir holding cluster-gateway (${bin})`);
  return bin;
}

/** Runs scripts/cluster-profile-consumer.mjs and returns the path of the Go ClusterProfile `consumer`. */
export function buildClusterProfileConsumer(): string {
  const bin = join(runBuildScript("cluster-profile-consumer.mjs", "the ClusterProfile consumer"), "consumer");
  if (!existsSync(bin)) throw new CommandError(`cluster-profile-consumer printed no bin dir holding consumer (${bin})`);
  return bin;
}

/** The OCM API module dir in the Go module cache (CRDs are read from there, never copied into the repo). */
export function ocmApiDir(): string {
  return ocmModuleDir("open-cluster-management.io/api");
}

/** The dir of the `sigs.k8s.io/cluster-inventory-api` version OCM requires (ClusterProfile CRD, consumer library). */
export function clusterInventoryApiDir(): string {
  return ocmModuleDir("sigs.k8s.io/cluster-inventory-api");
}

/** `module`'s dir in the Go module cache, at the version the OCM wrapper module requires. */
function ocmModuleDir(module: string): string {
  const res = run("go", ["list", "-mod=readonly", "-m", "-json", module], {
    allowFail: true,
    cwd: join(repoRoot, "test", "infra", "k8s", "ocm"),
    env: { ...process.env, GOTOOLCHAIN: "local", GOPROXY: "off", GOFLAGS: "-mod=readonly" },
  });
  if (res.status !== 0) throw new CommandError(`cannot resolve ${module}: ${res.stderr}`);
  const dir = (JSON.parse(res.stdout) as { Dir?: string }).Dir;
  if (!dir || !existsSync(dir)) {
    throw new CommandError(`${module} is not in the Go module cache: run node scripts/k8s-binaries.mjs`);
  }
  return dir;
}

// ---------------------------------------------------------------- state

export function readState(): EnvState | null {
  try {
    return JSON.parse(readFileSync(paths.state, "utf8")) as EnvState;
  } catch {
    return null;
  }
}

function writeState(s: EnvState): void {
  writeFileSync(paths.state, JSON.stringify(s, null, 2) + "\n");
}

/** A recorded environment whose namespaces and processes all still exist. */
export function isRunning(s: EnvState | null): s is EnvState {
  if (!s || !s.ready) return false;
  const ns = new Set(listNamespaces());
  return s.namespaces.every((n) => ns.has(n)) && s.procs.every((p) => pidAlive(p.pid));
}

// A lock so that two callers (e.g. env:up by hand and a test) do not build the environment twice.
async function withLock<T>(fn: () => Promise<T>): Promise<T> {
  mkdirSync(stateDir, { recursive: true });
  const deadline = Date.now() + 15 * 60_000;
  for (;;) {
    try {
      mkdirSync(paths.lock);
      writeFileSync(join(paths.lock, "pid"), String(process.pid));
      break;
    } catch {
      let holder = 0;
      try {
        holder = Number(readFileSync(join(paths.lock, "pid"), "utf8"));
      } catch {
        /* being created */
      }
      if (holder && !pidAlive(holder)) {
        rmSync(paths.lock, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) throw new CommandError(`environment lock ${paths.lock} held by pid ${holder}`);
      await sleep(500);
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(paths.lock, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- kubectl helpers

let binDir = "";
const bin = (name: string): string => join(binDir, name);

/** kubectl against cluster `c`, run inside that cluster's namespace on 127.0.0.1. */
export function kubectlLocal(
  c: ClusterName,
  args: string[],
  opts: { input?: string; allowFail?: boolean; timeoutMs?: number } = {},
): string {
  return runIn(nsOf(c), bin("kubectl"), ["--kubeconfig", paths.localKubeconfig(c), "--request-timeout=20s", ...args], {
    timeoutMs: opts.timeoutMs ?? 60_000,
    input: opts.input,
    allowFail: opts.allowFail,
  }).stdout;
}

// ---------------------------------------------------------------- processes

function startProc(
  state: EnvState,
  c: ClusterName | "lab",
  name: string,
  cmd: string,
  args: string[],
  env?: NodeJS.ProcessEnv,
  netOnly = false,
): ProcRecord {
  const logFile = join(paths.logs, `${name}.log`);
  const pid = startDetached(nsOf(c), cmd, args, logFile, env ?? process.env, repoRoot, netOnly);
  const rec = { name, ns: nsOf(c), pid, log: logFile };
  state.procs.push(rec);
  writeState(state);
  return rec;
}

function tail(file: string, lines = 25): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

function assertAlive(recs: ProcRecord[]): void {
  for (const r of recs) {
    if (!pidAlive(r.pid))
      throw new CommandError(`${r.name} (pid ${r.pid}) exited; last lines of ${r.log}:\n${tail(r.log)}`);
  }
}

function startEtcd(state: EnvState, c: ClusterName): ProcRecord {
  const data = join(paths.data, c, "etcd");
  mkdirSync(data, { recursive: true });
  return startProc(state, c, `${c}-etcd`, bin("etcd"), [
    `--name=${c}`,
    `--data-dir=${data}`,
    "--listen-client-urls=http://127.0.0.1:2379",
    "--advertise-client-urls=http://127.0.0.1:2379",
    "--listen-peer-urls=http://127.0.0.1:2380",
    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
    `--initial-cluster=${c}=http://127.0.0.1:2380`,
    "--listen-metrics-urls=http://127.0.0.1:2381",
    "--unsafe-no-fsync=true",
    "--log-level=warn",
  ]);
}

function startApiserver(state: EnvState, c: ClusterName): ProcRecord {
  const f = (n: string): string => pkiFile(c, n);
  return startProc(state, c, `${c}-kube-apiserver`, bin("kube-apiserver"), [
    "--etcd-servers=http://127.0.0.1:2379",
    "--bind-address=0.0.0.0",
    `--secure-port=${APISERVER_PORT}`,
    `--advertise-address=${HOST_ADDR[c]}`,
    `--cert-dir=${join(paths.data, c, "apiserver-certs")}`,
    `--tls-cert-file=${f("apiserver.crt")}`,
    `--tls-private-key-file=${f("apiserver.key")}`,
    `--client-ca-file=${f("ca.crt")}`,
    // The front proxy (aggregated APIs), as kubeadm and kind configure it; published in
    // kube-system/extension-apiserver-authentication, which aggregated API servers and the OCM
    // controllers' delegated authn read.
    `--requestheader-client-ca-file=${f("front-proxy/ca.crt")}`,
    `--requestheader-allowed-names=${FRONT_PROXY_CLIENT_CN}`,
    `--proxy-client-cert-file=${f("front-proxy/client.crt")}`,
    `--proxy-client-key-file=${f("front-proxy/client.key")}`,
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    `--service-cluster-ip-range=${SERVICE_CIDR[c]}`,
    // pods/log, exec, attach, portforward go to the kubelet API on the Node's InternalIP (kubelet-api).
    `--kubelet-client-certificate=${f("apiserver-kubelet-client.crt")}`,
    `--kubelet-client-key=${f("apiserver-kubelet-client.key")}`,
    `--kubelet-certificate-authority=${f("ca.crt")}`,
    "--kubelet-preferred-address-types=InternalIP",
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    `--service-account-key-file=${f("sa.pub")}`,
    `--service-account-signing-key-file=${f("sa.key")}`,
    "--authorization-mode=RBAC",
    "--allow-privileged=true",
    "--enable-priority-and-fairness=false",
    "--profiling=false",
    "--v=1",
  ]);
}

// Controllers a kubelet-less cluster can use. No deployment/replicaset controllers: the process
// kubelet owns Deployment status.
const KCM_CONTROLLERS = [
  "namespace-controller",
  "garbage-collector-controller",
  "serviceaccount-controller",
  "serviceaccount-token-controller",
  "root-ca-certificate-publisher-controller",
  "clusterrole-aggregation-controller",
];
const KCM_HUB_EXTRA = ["certificatesigningrequest-signing-controller", "certificatesigningrequest-cleaner-controller"];

function startKcm(state: EnvState, c: ClusterName): ProcRecord {
  const f = (n: string): string => pkiFile(c, n);
  const controllers = c === "hub" ? [...KCM_CONTROLLERS, ...KCM_HUB_EXTRA] : KCM_CONTROLLERS;
  return startProc(state, c, `${c}-kube-controller-manager`, bin("kube-controller-manager"), [
    `--kubeconfig=${paths.localKubeconfig(c)}`,
    `--authentication-kubeconfig=${paths.localKubeconfig(c)}`,
    `--authorization-kubeconfig=${paths.localKubeconfig(c)}`,
    "--bind-address=127.0.0.1",
    "--secure-port=10257",
    "--leader-elect=false",
    `--controllers=${controllers.join(",")}`,
    `--root-ca-file=${f("ca.crt")}`,
    `--service-account-private-key-file=${f("sa.key")}`,
    `--cluster-signing-cert-file=${f("ca.crt")}`,
    `--cluster-signing-key-file=${f("ca.key")}`,
    "--use-service-account-credentials=false",
    "--v=1",
  ]);
}

// ---------------------------------------------------------------- OCM

const crdFiles = (apiDir: string, rel: string[]): string[] => rel.map((r) => join(apiDir, r));

const HUB_CRDS = [
  "cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml",
  "cluster/v1beta2/0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml",
  "cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml",
  "cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml",
  "cluster/v1beta1/0000_03_clusters.open-cluster-management.io_placementdecisions.crd.yaml",
  "cluster/v1alpha1/0000_05_clusters.open-cluster-management.io_addonplacementscores.crd.yaml",
  "work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml",
  "work/v1alpha1/0000_00_work.open-cluster-management.io_manifestworkreplicasets.crd.yaml",
  // v1beta1 dir: both served versions (v1alpha1 storage); conversion via the addon webhook below.
  "addon/v1beta1/0000_00_addon.open-cluster-management.io_clustermanagementaddons.crd.yaml",
  "addon/v1beta1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml",
  "addon/v1beta1/0000_02_addon.open-cluster-management.io_addondeploymentconfigs.crd.yaml",
  "addon/v1alpha1/0000_03_addon.open-cluster-management.io_addontemplates.crd.yaml",
];
const CONVERTED_CRDS = [
  "clustermanagementaddons.addon.open-cluster-management.io",
  "managedclusteraddons.addon.open-cluster-management.io",
];
const MANAGED_CRDS = [
  "cluster/v1alpha1/0000_02_clusters.open-cluster-management.io_clusterclaims.crd.yaml",
  "work/v1/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml",
];

function applyCrds(c: ClusterName, files: string[]): void {
  kubectlLocal(c, ["apply", "--server-side", "--force-conflicts", ...files.flatMap((f) => ["-f", f])], {
    timeoutMs: 120_000,
  });
  // A CRD created a moment ago may have no status.conditions yet, and `kubectl wait` then fails
  // at once ("conditions accessor error: <nil>") instead of waiting: ask again, a bounded few times.
  for (let attempt = 1; ; attempt++) {
    try {
      kubectlLocal(c, ["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"], { timeoutMs: 90_000 });
      return;
    } catch (err) {
      if (attempt >= 10 || !/accessor error/.test(errorMessage(err))) throw err;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
    }
  }
}

// Our own RBAC for the bootstrap identity (what a klusterlet needs before its CSR is approved).
function bootstrapRbac(): string {
  return `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cpenv:ocm-bootstrap
rules:
- apiGroups: ["certificates.k8s.io"]
  resources: ["certificatesigningrequests"]
  verbs: ["create", "get", "list", "watch"]
- apiGroups: ["cluster.open-cluster-management.io"]
  resources: ["managedclusters"]
  verbs: ["get", "create", "list", "watch"]
- apiGroups: ["cluster.open-cluster-management.io"]
  resources: ["managedclustersets/join"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cpenv:ocm-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cpenv:ocm-bootstrap
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: ${BOOTSTRAP_USER}
---
apiVersion: v1
kind: Namespace
metadata:
  name: ${HUB_NAMESPACE}
`;
}

function conversionPatch(): string {
  const caBundle = readFileSync(pkiFile("hub", "ca.crt")).toString("base64");
  return JSON.stringify({
    spec: {
      conversion: {
        strategy: "Webhook",
        webhook: {
          conversionReviewVersions: ["v1", "v1beta1"],
          clientConfig: { url: "https://127.0.0.1:9443/convert", caBundle },
        },
      },
    },
  });
}

function startOcmHub(state: EnvState, clusterProfile: boolean): ProcRecord[] {
  const kc = paths.localKubeconfig("hub");
  const common = [`--kubeconfig=${kc}`, `--namespace=${HUB_NAMESPACE}`, "--disable-leader-election"];
  const webhookCerts = join(paths.data, "hub", "addon-webhook-certs");
  mkdirSync(webhookCerts, { recursive: true });
  writeFileSync(join(webhookCerts, "tls.crt"), readFileSync(pkiFile("hub", "webhook.crt")));
  writeFileSync(join(webhookCerts, "tls.key"), readFileSync(pkiFile("hub", "webhook.key")));
  return [
    startProc(state, "hub", "hub-ocm-registration", bin("registration"), [
      "controller",
      ...common,
      "--listen=127.0.0.1:9601",
      `--feature-gates=ManagedClusterAutoApproval=true${clusterProfile ? ",ClusterProfile=true" : ""}`,
      `--auto-approved-csr-users=${BOOTSTRAP_USER}`,
    ]),
    startProc(state, "hub", "hub-ocm-placement", bin("placement"), [
      "controller",
      ...common,
      "--listen=127.0.0.1:9602",
    ]),
    startProc(state, "hub", "hub-ocm-addon-manager", bin("addon"), ["manager", ...common, "--listen=127.0.0.1:9603"]),
    startProc(
      state,
      "hub",
      "hub-ocm-addon-webhook",
      bin("addon"),
      ["webhook-server", "--port=9443", `--certdir=${webhookCerts}`],
      { ...process.env, KUBECONFIG: kc },
    ),
  ];
}

function startKlusterlet(state: EnvState, mc: ClusterName): ProcRecord {
  const dir = join(paths.data, mc, "klusterlet");
  const hubDir = join(dir, "hub-kubeconfig");
  mkdirSync(hubDir, { recursive: true });
  const bootstrap = join(dir, "bootstrap.kubeconfig");
  writeFileSync(
    bootstrap,
    kubeconfig(
      apiserverUrl("hub"),
      pkiFile("hub", "ca.crt"),
      pkiFile("hub", "bootstrap.crt"),
      pkiFile("hub", "bootstrap.key"),
      "bootstrap",
    ),
  );
  kubectlLocal(mc, ["create", "namespace", AGENT_NAMESPACE], { allowFail: true });
  return startProc(state, mc, `${mc}-klusterlet-agent`, bin("registration-operator"), [
    "agent",
    `--spoke-cluster-name=${mc}`,
    `--bootstrap-kubeconfig=${bootstrap}`,
    `--hub-kubeconfig-dir=${hubDir}`,
    `--kubeconfig=${paths.localKubeconfig(mc)}`,
    `--namespace=${AGENT_NAMESPACE}`,
    `--agent-id=${mc}-cpenv`,
    "--workload-source-driver=kube",
    `--workload-source-config=${join(hubDir, "kubeconfig")}`,
    `--spoke-external-server-urls=${apiserverUrl(mc)}`,
    "--listen=127.0.0.1:9611",
    "--disable-leader-election",
  ]);
}

interface Condition {
  type: string;
  status: string;
}

/** ManagedCluster conditions on the hub, by type. */
export function managedClusterConditions(name: string): Record<string, string> {
  const out = kubectlLocal("hub", ["get", "managedcluster", name, "-o", "json"], { allowFail: true });
  if (!out.trim()) return {};
  const mc = JSON.parse(out) as { status?: { conditions?: Condition[] } };
  return Object.fromEntries((mc.status?.conditions ?? []).map((c) => [c.type, c.status]));
}

// ---------------------------------------------------------------- up / down

function writeClientFiles(): void {
  for (const c of CLUSTERS) {
    writeFileSync(
      paths.kubeconfig(c),
      kubeconfig(
        apiserverUrl(c),
        pkiFile(c, "ca.crt"),
        pkiFile(c, "admin.crt"),
        pkiFile(c, "admin.key"),
        "cpenv-admin",
      ),
    );
  }
  // kubectl wrapper: always runs in the lab namespace, where the kubeconfigs' addresses route.
  writeFileSync(
    paths.kubectl,
    `#!/bin/sh\n# cluster-proxy test environment: kubectl, run in the ${nsOf("lab")} network namespace.\n` +
      `if [ "$(ip netns identify $$ 2>/dev/null)" = "${nsOf("lab")}" ]; then exec "${bin("kubectl")}" "$@"; fi\n` +
      `exec ip netns exec ${nsOf("lab")} "${bin("kubectl")}" "$@"\n`,
  );
  chmodSync(paths.kubectl, 0o755);
}

/**
 * The helm wrapper beside kubectl: runs `helmBinary` in the lab namespace (like kubectl), with
 * helm's config, cache and data directories under the environment's dir (unless set), so it
 * neither reads nor writes the caller's ~/.config/helm.
 */
function writeHelmWrapper(helmBinary: string): void {
  const home = (d: string): string =>
    `export HELM_${d}_HOME="\${HELM_${d}_HOME:-${join(paths.helmHome, d.toLowerCase())}}"\n`;
  writeFileSync(
    paths.helm,
    `#!/bin/sh\n# cluster-proxy test environment: helm, run in the ${nsOf("lab")} network namespace.\n` +
      home("CONFIG") +
      home("CACHE") +
      home("DATA") +
      `if [ "$(ip netns identify $$ 2>/dev/null)" = "${nsOf("lab")}" ]; then exec "${helmBinary}" "$@"; fi\n` +
      `exec ip netns exec ${nsOf("lab")} "${helmBinary}" "$@"\n`,
  );
  chmodSync(paths.helm, 0o755);
}

export interface UpResult {
  state: EnvState;
  /** true when an already-running environment was reused */
  reused: boolean;
}

/** Brings the environment up, or reuses a running one. Every wait is bounded. */
export async function up(
  opts: { timeoutMs?: number; owner?: "manual" | "fixture" } & EnvOptions = {},
): Promise<UpResult> {
  const owner = opts.owner ?? "manual";
  const clusterProfile = opts.clusterProfile === true || process.env.CPENV_CLUSTER_PROFILE === "1";
  checkNetworkPrereqs();
  const cacheDir = buildBinaries();
  binDir = join(cacheDir, "bin");
  const apiDir = ocmApiDir();
  const inventoryDir = clusterProfile ? clusterInventoryApiDir() : "";
  const helmBinary = buildHelm();
  const kubeletApiBinary = buildKubeletApi();
  const clusterGatewayBinary = buildClusterGateway();
  return withLock(async () => {
    writeHelmWrapper(helmBinary);
    const prev = readState();
    const lacks = isRunning(prev) && clusterProfile && !prev.clusterProfile;
    if (lacks) log("the running environment has no ClusterProfile support, which was asked for: replacing it");
    if (isRunning(prev) && prev.binDir === binDir && !lacks) {
      if (owner === "fixture" && prev.owner === "fixture" && !pidAlive(prev.ownerPid)) {
        // Left behind by a test process that was killed before its teardown: adopt it, so that
        // this fixture tears it down.
        log(`adopting the environment left running by pid ${prev.ownerPid} (started ${prev.startedAt})`);
        prev.ownerPid = process.pid;
        writeState(prev);
        return { state: prev, reused: false };
      }
      log(`reusing the running environment (started ${prev.startedAt})`);
      return { state: prev, reused: true };
    }
    if (prev || listNamespaces().some((n) => ALL_NAMESPACES.includes(n))) {
      log("removing a stale or incomplete environment ...");
      await downLocked();
    }
    ensureNft(log);
    const t0 = Date.now();
    const deadline = t0 + (opts.timeoutMs ?? 170_000);
    const left = (): number => Math.max(1_000, deadline - Date.now());
    for (const d of [paths.pki, paths.data, paths.logs, paths.run]) mkdirSync(d, { recursive: true });
    const state: EnvState = {
      version: 1,
      startedAt: new Date().toISOString(),
      owner,
      ownerPid: process.pid,
      binDir,
      cacheDir,
      namespaces: [],
      procs: [],
      ready: false,
      clusterProfile,
    };
    writeState(state);
    try {
      log("creating network namespaces and links ...");
      state.namespaces = [...ALL_NAMESPACES];
      writeState(state);
      createNetwork();
      createPki();
      writeClientFiles();

      log("starting etcd and kube-apiserver in hub, mc1, mc2 ...");
      const core: ProcRecord[] = [];
      for (const c of CLUSTERS) core.push(startEtcd(state, c));
      for (const c of CLUSTERS) core.push(startApiserver(state, c));
      for (const c of CLUSTERS) {
        await waitFor(`${c} kube-apiserver /readyz`, left(), () => {
          assertAlive(core);
          return kubectlLocal(c, ["get", "--raw", "/readyz"], { allowFail: true, timeoutMs: 15_000 }).trim() === "ok";
        });
      }
      log(`apiservers ready after ${((Date.now() - t0) / 1000).toFixed(1)}s`);
      for (const c of CLUSTERS) core.push(startKcm(state, c));
      core.push(
        startProc(state, "lab", "lab-bridge", process.execPath, [
          join(repoRoot, "test", "infra", "env", "bridge.mjs"),
          ...CLUSTERS.map((c) => `${paths.bridgeSocket(c)}=${HOST_ADDR[c]}:${APISERVER_PORT}`),
        ]),
      );

      log("installing OCM CRDs (from the Go module cache) ...");
      applyCrds("hub", crdFiles(apiDir, HUB_CRDS));
      for (const mc of MANAGED) applyCrds(mc, crdFiles(apiDir, MANAGED_CRDS));
      kubectlLocal("hub", ["apply", "-f", "-"], { input: bootstrapRbac() });
      if (clusterProfile) {
        log("installing the ClusterProfile CRD (sigs.k8s.io/cluster-inventory-api, from the Go module cache) ...");
        applyCrds("hub", [join(inventoryDir, "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")]);
      }

      log("starting the OCM hub (registration, placement, addon manager, addon webhook) ...");
      const hubProcs = startOcmHub(state, clusterProfile);
      await waitFor("addon conversion webhook on 127.0.0.1:9443", left(), () => {
        assertAlive(hubProcs);
        return (
          runIn(nsOf("hub"), "bash", ["-c", "exec 3<>/dev/tcp/127.0.0.1/9443"], { allowFail: true, timeoutMs: 5_000 })
            .status === 0
        );
      });
      for (const crd of CONVERTED_CRDS)
        kubectlLocal("hub", ["patch", "crd", crd, "--type=merge", "-p", conversionPatch()]);

      log("starting klusterlet agents in mc1, mc2 and the process kubelets ...");
      const agents = MANAGED.map((mc) => startKlusterlet(state, mc));
      // Network namespace only: the kubelet creates its pods' namespaces (ip netns add), which
      // must be visible to everyone (teardown, `ip netns exec` from the tests).
      const kubelets = CLUSTERS.map((c) =>
        startProc(
          state,
          c,
          `${c}-process-kubelet`,
          process.execPath,
          [
            "--conditions=source",
            "--import",
            "tsx",
            join(repoRoot, "test", "infra", "env", "kubelet.ts"),
            `--cluster=${c}`,
            `--kubeconfig=${paths.localKubeconfig(c)}`,
            `--work-dir=${join(paths.data, c, "kubelet")}`,
            `--cluster-gateway=${clusterGatewayBinary}`,
          ],
          process.env,
          true,
        ),
      );
      // The kubelet API of each node (the Node object the process kubelet registers points here).
      const kubeletApis = CLUSTERS.map((c) =>
        startProc(
          state,
          c,
          `${c}-kubelet-api`,
          kubeletApiBinary,
          [
            `--address=${HOST_ADDR[c]}:${KUBELET_PORT}`,
            `--tls-cert-file=${pkiFile(c, "kubelet.crt")}`,
            `--tls-private-key-file=${pkiFile(c, "kubelet.key")}`,
            `--client-ca-file=${pkiFile(c, "ca.crt")}`,
            `--allowed-users=${KUBELET_CLIENT_CN}`,
            `--pods-dir=${join(paths.data, c, "kubelet")}`,
          ],
          process.env,
          true,
        ),
      );
      const all = [...core, ...hubProcs, ...agents, ...kubelets, ...kubeletApis];

      for (const mc of MANAGED) {
        await waitFor(`ManagedCluster ${mc} to appear on the hub`, left(), () => {
          assertAlive(all);
          return (
            Object.keys(managedClusterConditions(mc)).length > 0 ||
            kubectlLocal("hub", ["get", "managedcluster", mc, "-o", "name"], { allowFail: true }).trim() !== ""
          );
        });
        // Accept like `clusteradm accept` if auto-approval has not already done it.
        kubectlLocal(
          "hub",
          ["patch", "managedcluster", mc, "--type=merge", "-p", '{"spec":{"hubAcceptsClient":true}}'],
          { allowFail: true },
        );
      }
      for (const mc of MANAGED) {
        await waitFor(
          `ManagedCluster ${mc} Joined and Available`,
          left(),
          () => {
            assertAlive(all);
            const c = managedClusterConditions(mc);
            return c.ManagedClusterJoined === "True" && c.ManagedClusterConditionAvailable === "True";
          },
          1_000,
        );
      }
      state.ready = true;
      state.readySeconds = (Date.now() - t0) / 1000;
      writeState(state);
      log(`environment ready in ${state.readySeconds.toFixed(1)}s: ${stateDir}`);
      return { state, reused: false };
    } catch (err) {
      log(`bring-up failed: ${errorMessage(err)}`);
      log(`logs are in ${paths.logs} (removed by env:down; set CPENV_KEEP_ON_FAILURE=1 to keep the environment)`);
      if (process.env.CPENV_KEEP_ON_FAILURE !== "1") await downLocked({ keepLogs: true });
      throw err;
    }
  });
}

/**
 * Pod processes run with their working directory in the kubelets' work dirs. This finds them even
 * when their network namespaces cannot be named any more (e.g. the environment was made from a
 * test runner's private mount namespace that is gone, and a kubelet was killed before it could
 * stop its pods).
 */
function podProcesses(): number[] {
  const root = `${paths.data}/`;
  const out: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readlinkSync(`/proc/${e}/cwd`).startsWith(root)) out.push(Number(e));
    } catch {
      /* gone, or not ours to read */
    }
  }
  return out;
}

async function downLocked(opts: { keepLogs?: boolean } = {}): Promise<void> {
  const s = readState();
  const foreign = s?.namespaces.filter((n) => !n.startsWith(NS_PREFIX)) ?? [];
  if (foreign.length > 0) {
    // Never stop the processes or delete the namespaces of an environment made with another prefix.
    throw new CommandError(
      `${paths.state} records namespaces ${foreign.join(", ")}, which do not carry this run's prefix ` +
        `${NS_PREFIX} (CPENV_NS_PREFIX): use the same CPENV_NS_PREFIX as the run that made it, or another CPENV_STATE_DIR`,
    );
  }
  const recorded = s?.procs.map((p) => p.pid) ?? [];
  await stopPids(recorded, 5_000);
  // Anything else still inside our namespaces (children of the process kubelets, strays).
  for (let i = 0; i < 3; i++) {
    const left = [...new Set([...pidsInOurNamespaces(), ...podProcesses()])];
    if (left.length === 0) break;
    await stopPids(left, 3_000);
  }
  deleteNetwork();
  for (const d of [paths.pki, paths.data, paths.run]) rmSync(d, { recursive: true, force: true });
  if (!opts.keepLogs) rmSync(paths.logs, { recursive: true, force: true });
  rmSync(paths.helmHome, { recursive: true, force: true });
  for (const f of [paths.state, paths.kubectl, paths.helm, ...CLUSTERS.map((c) => paths.kubeconfig(c))])
    rmSync(f, { force: true });
}

/** Removes everything up() made: processes (by recorded PID, then by namespace), namespaces, files. */
/**
 * Stops cluster `c`'s kube-apiserver (SIGTERM, SIGKILL after 5 s), as a control-plane upgrade or
 * crash does; {@link startApiserverAgain} brings it back with the same flags, data and address.
 */
export async function stopApiserver(c: ClusterName): Promise<void> {
  await withLock(async () => {
    const state = readState();
    if (!state) throw new CommandError("no environment is running");
    const name = `${c}-kube-apiserver`;
    await stopPids(
      state.procs.filter((p) => p.name === name).map((p) => p.pid),
      5_000,
    );
    state.procs = state.procs.filter((p) => p.name !== name);
    writeState(state);
  });
}

/** Starts cluster `c`'s kube-apiserver again after {@link stopApiserver}; resolves once /readyz is ok. */
export async function startApiserverAgain(c: ClusterName, timeoutMs = 120_000): Promise<void> {
  await withLock(async () => {
    const state = readState();
    if (!state) throw new CommandError("no environment is running");
    const rec = startApiserver(state, c);
    await waitFor(`${c} kube-apiserver /readyz`, timeoutMs, () => {
      assertAlive([rec]);
      return kubectlLocal(c, ["get", "--raw", "/readyz"], { allowFail: true, timeoutMs: 15_000 }).trim() === "ok";
    });
  });
}

export async function down(): Promise<void> {
  await withLock(() => downLocked());
  // Leave no empty state dir behind either.
  try {
    if (readdirSync(stateDir).length === 0) rmSync(stateDir, { recursive: true, force: true });
  } catch {
    /* gone */
  }
}

export function describe(state: EnvState): string {
  const lines = [
    `cluster-proxy test environment (${state.procs.length} processes, namespaces ${state.namespaces.join(", ")})`,
    `  apiservers: hub ${apiserverUrl("hub")}, mc1 ${apiserverUrl("mc1")}, mc2 ${apiserverUrl("mc2")} (reachable from ${nsOf("lab")})`,
    `  try:  ${paths.kubectl} --kubeconfig ${paths.kubeconfig("hub")} get managedclusters`,
    `  logs: ${paths.logs}`,
    `  stop: npm run env:down`,
  ];
  return lines.join("\n");
}
