// The process kubelet: there is no real kubelet (nor container runtime) in the test environment,
// so this watches every Deployment in one cluster's apiserver and runs each replica ("pod") as a
// set of local processes, one per container, restarting them on exit, probing their readiness and
// liveness, rolling out template changes (RollingUpdate with maxSurge / maxUnavailable, or
// Recreate), and writing the Deployment's status back as the deployment controller would.
//
//   node --conditions=source --import tsx test/infra/env/kubelet.ts --cluster=mc1 --kubeconfig=F --work-dir=D
//
// Mapping (see docs/testing/environment.md):
//   image "cpenv.local/node[:tag]"      -> node (this Node.js)
//   image containing "cluster-proxy"    -> node <repo>/packages/cli/dist/main.js
//   image <registry/>oamdev/cluster-gateway[:tag] -> the --cluster-gateway=F binary, when given
//                                        (KubeVela's cluster-gateway, scripts/cluster-gateway-binary.mjs)
//   anything else: the pod cannot start and the Deployment reports the image as not mapped.
//   argv = entrypoint + container.command[1:] + container.args
//   secret / configMap / projected / downwardAPI / emptyDir volumes are written to files under the
//   work dir (Secret and ConfigMap content is kept up to date in place, atomically, as a kubelet
//   does); every occurrence of a volumeMount's mountPath in command, args and env values is
//   replaced by that directory (no mount namespaces: the files cannot appear at the container path
//   itself). The pod's service account token, ca.crt and namespace are written the same way and
//   /var/run/secrets/kubernetes.io/serviceaccount is rewritten to them; in a pod with its own network
//   namespace they are also bind-mounted at that path (its private mount namespace).
// It registers the cluster's Node (the address of the kubelet API, test/infra/k8s/kubelet-api), writes
// each container's output as CRI log files, and describes every pod in <pod dir>/pod.json for the
// kubelet API (logs, exec, attach, port-forward through kube-apiserver).
import * as k8s from "@kubernetes/client-node";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  closeSync,
  constants as fsConstants,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import os from "node:os";
import { join } from "node:path";
import {
  APISERVER_PORT,
  type ClusterName,
  HOST_ADDR,
  KUBELET_PORT,
  LB_INGRESS_ANNOTATION,
  LB_POOL,
  NETNS_ANNOTATION,
  addrIn,
  dnsServiceIp,
  podNsPrefix,
  repoRoot,
} from "./config.js";
import { CriLogWriter, type CriStream } from "./crilog.js";
import { LB_DOMAIN, clusterResolver, serveDns } from "./dns.js";
import { run } from "./exec.js";
import { type PodNet, PodIpam, setupPodNetwork, teardownPodNetwork } from "./podnet.js";
import { type PodView, planRollout, surgeAndUnavailable, templateHash } from "./rollout.js";
import { type ServiceRule, renderServiceTable, resolveTargetPort } from "./services.js";
import { type Payload, payloadDigest, substituteMountPaths, writeAtomic } from "./volumes.js";

const MANAGED_BY = "process-kubelet.cpenv.cluster-proxy.io";

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const m = /^--([^=]+)=(.*)$/.exec(a);
    if (!m) throw new Error(`bad argument ${a}`);
    return [m[1], m[2]];
  }),
) as Record<string, string>;
const cluster = args.cluster as ClusterName;
const workDir = args["work-dir"]!;
const kc = new k8s.KubeConfig();
kc.loadFromFile(args.kubeconfig!);
const apps = kc.makeApiClient(k8s.AppsV1Api);
const core = kc.makeApiClient(k8s.CoreV1Api);
const discovery = kc.makeApiClient(k8s.DiscoveryV1Api);
const nodeAddr = HOST_ADDR[cluster];
const caPem =
  readFileSync(kc.getCurrentCluster()!.caFile ?? "/dev/null", "utf8") ||
  Buffer.from(kc.getCurrentCluster()!.caData ?? "", "base64").toString();

const log = (m: string): void => {
  process.stdout.write(`${new Date().toISOString()} process-kubelet[${cluster}]: ${m}\n`);
};
const firstLine = (err: unknown): string => (err instanceof Error ? err.message : String(err)).split("\n")[0]!;

// ---------------------------------------------------------------- informers

let kick: (() => void) | null = null;
const wake = (): void => kick?.();

function informer<T extends k8s.KubernetesObject>(
  path: string,
  list: () => Promise<k8s.KubernetesListObject<T>>,
): k8s.Informer<T> & k8s.ObjectCache<T> {
  const inf = k8s.makeInformer(kc, path, list);
  for (const ev of ["add", "update", "delete"] as const) inf.on(ev, wake);
  inf.on("error", (err: unknown) => {
    log(`watch ${path} ended (${firstLine(err)}); restarting in 1s`);
    setTimeout(() => {
      inf.start().catch((e: unknown) => log(`watch ${path} restart failed: ${firstLine(e)}`));
    }, 1_000);
  });
  return inf;
}

const deployments = informer<k8s.V1Deployment>("/apis/apps/v1/deployments", () =>
  apps.listDeploymentForAllNamespaces(),
);
const secrets = informer<k8s.V1Secret>("/api/v1/secrets", () => core.listSecretForAllNamespaces());
const configMaps = informer<k8s.V1ConfigMap>("/api/v1/configmaps", () => core.listConfigMapForAllNamespaces());
const services = informer<k8s.V1Service>("/api/v1/services", () => core.listServiceForAllNamespaces());
const slices = informer<k8s.V1EndpointSlice>("/apis/discovery.k8s.io/v1/endpointslices", () =>
  discovery.listEndpointSliceForAllNamespaces(),
);
const podObjects = informer<k8s.V1Pod>("/api/v1/pods", () => core.listPodForAllNamespaces());

// ---------------------------------------------------------------- pods

interface Container {
  name: string;
  argv: string[];
  env: NodeJS.ProcessEnv;
  readiness?: k8s.V1Probe;
  liveness?: k8s.V1Probe;
  /** the FIFO that is the container's stdin (spec `stdin: true`; kubectl attach -i writes to it) */
  stdinFifo?: string;
  child: ChildProcess | null;
  startedAt: number;
  restarts: number;
  nextStart: number;
  lastError?: string;
  ready: boolean;
  probing: { readiness: boolean; liveness: boolean };
  lastProbe: { readiness: number; liveness: number };
  /** consecutive results: >0 successes, <0 failures */
  streak: { readiness: number; liveness: number };
}

interface Volume {
  dir: string;
  /** the volume's source, to recompute its payload when a Secret or ConfigMap changes */
  source: k8s.V1Volume;
  digest: string;
}

interface Pod {
  name: string;
  uid: string;
  namespace: string;
  deployment: string;
  hash: string;
  seq: number;
  dir: string;
  ip: string;
  spec: k8s.V1PodSpec;
  labels: Record<string, string>;
  containers: Container[];
  volumes: Volume[];
  /** set once prepare() succeeded */
  prepared: boolean;
  preparing: boolean;
  error?: string;
  terminating: boolean;
  saToken?: string;
  /** own network namespace and address (unset for hostNetwork pods, which use the node's) */
  net?: PodNet;
  deploymentUid?: string;
  /**
   * The Pod object mirrors this pod: uid once created, last status written, whether the last status
   * written said Ready, whether marking it terminating (a graceful delete) is still in flight.
   */
  api: {
    uid?: string;
    creating: boolean;
    createdAt: number;
    lastStatus?: string;
    readyPublished: boolean;
    deleting: boolean;
  };
  startedAt: number;
  /** when a failed prepare() may be retried */
  nextPrepare: number;
}

/** The pod network: where a pod's processes run and what address they have. */
const ipam = new PodIpam();
const network = {
  setup(pod: Pod): void {
    if (pod.spec.hostNetwork) {
      pod.ip = nodeAddr;
      return;
    }
    const existing = new Set(
      run("ip", ["netns", "list"], { allowFail: true })
        .stdout.split("\n")
        .map((l) => l.split(" ")[0]!)
        .filter((n) => n.startsWith(podNsPrefix(cluster))),
    );
    const octet = ipam.allocate();
    try {
      pod.net = setupPodNetwork(cluster, octet, pod, existing);
    } catch (err) {
      ipam.release(octet);
      throw err;
    }
    pod.ip = pod.net.ip;
    log(`pod ${pod.namespace}/${pod.name}: address ${pod.ip}, network namespace ${pod.net.ns}`);
  },
  teardown(pod: Pod): void {
    if (!pod.net) return;
    const n = pod.net;
    pod.net = undefined;
    teardownPodNetwork(n);
    ipam.release(n.octet);
  },
  wrap: (pod: Pod, argv: string[]): string[] => (pod.net ? ["ip", "netns", "exec", pod.net.ns, ...argv] : argv),
};

const SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount";

/**
 * A pod with its own network namespace also has a private mount namespace (`ip netns exec` makes
 * one): there the service account files are bind-mounted at their well-known path, as a kubelet's
 * projected volume is, so in-cluster clients that read that path themselves work
 * (@kubernetes/client-node's loadFromCluster, the addon manager the chart installs).
 */
function mountServiceAccount(pod: Pod, argv: string[]): string[] {
  const saDir = join(pod.dir, "serviceaccount");
  if (!pod.net || !existsSync(join(saDir, "token"))) return argv;
  return ["sh", "-c", `mkdir -p ${SA_PATH} && mount --bind "$0" ${SA_PATH} && exec "$@"`, saDir, ...argv];
}

const pods = new Map<string, Pod>(); // by uid
let podSeq = 0;

/** KubeVela's cluster-gateway image (oamdev/cluster-gateway, any registry and tag), not its addon manager's. */
const CLUSTER_GATEWAY_IMAGE = /(?:^|\/)oamdev\/cluster-gateway(?:[:@].*)?$/;

function entrypoint(image: string): string[] | null {
  if (/^cpenv\.local\/node(:.*)?$/.test(image)) return [process.execPath];
  if (image.includes("cluster-proxy"))
    return [process.execPath, ...NODE_FLAGS, join(repoRoot, "packages", "cli", "dist", "main.js")];
  if (CLUSTER_GATEWAY_IMAGE.test(image) && args["cluster-gateway"]) return [args["cluster-gateway"]];
  return null;
}

const keyOf = (d: k8s.V1Deployment): string => `${d.metadata!.namespace}/${d.metadata!.name}`;

function newPod(d: k8s.V1Deployment, hash: string): Pod {
  const name = `${d.metadata!.name}-${hash}-${randomBytes(3).toString("hex").slice(0, 5)}`;
  const uid = randomBytes(8).toString("hex");
  const pod: Pod = {
    name,
    uid,
    namespace: d.metadata!.namespace!,
    deployment: keyOf(d),
    hash,
    seq: ++podSeq,
    dir: join(workDir, `${d.metadata!.namespace}_${name}`),
    ip: "",
    spec: d.spec!.template.spec!,
    labels: { ...(d.spec?.template.metadata?.labels ?? {}), "pod-template-hash": hash },
    containers: [],
    volumes: [],
    prepared: false,
    preparing: false,
    terminating: false,
    deploymentUid: d.metadata?.uid,
    api: { creating: false, createdAt: 0, readyPublished: false, deleting: false },
    startedAt: 0,
    nextPrepare: 0,
  };
  pods.set(uid, pod);
  log(`created pod ${pod.namespace}/${name} for ${pod.deployment}`);
  return pod;
}

function notFound(kind: string, ns: string, name: string): Error {
  return new Error(`${kind} ${ns}/${name} not found`);
}

function secretData(ns: string, name: string, optional: boolean | undefined): Record<string, Buffer> | null {
  const s = secrets.get(name, ns);
  if (!s) {
    if (optional) return null;
    throw notFound("secret", ns, name);
  }
  const out: Record<string, Buffer> = {};
  for (const [k, v] of Object.entries(s.data ?? {})) out[k] = Buffer.from(v, "base64");
  for (const [k, v] of Object.entries(s.stringData ?? {})) out[k] = Buffer.from(v);
  return out;
}

function configMapData(ns: string, name: string, optional: boolean | undefined): Record<string, Buffer> | null {
  const cm = configMaps.get(name, ns);
  if (!cm) {
    if (optional) return null;
    throw notFound("configmap", ns, name);
  }
  const out: Record<string, Buffer> = {};
  for (const [k, v] of Object.entries(cm.data ?? {})) out[k] = Buffer.from(v);
  for (const [k, v] of Object.entries(cm.binaryData ?? {})) out[k] = Buffer.from(v, "base64");
  return out;
}

function addItems(
  payload: Payload,
  data: Record<string, Buffer> | null,
  items: { key: string; path: string }[] | undefined,
  what: string,
  optional: boolean | undefined,
): void {
  if (!data) return;
  if (!items) {
    for (const [k, v] of Object.entries(data)) payload.set(k, v);
    return;
  }
  for (const it of items) {
    const v = data[it.key];
    if (v === undefined) {
      if (optional) continue;
      throw new Error(`${what} has no key ${it.key}`);
    }
    payload.set(it.path, v);
  }
}

/** Stands for the Pod object's uid in a container's env and args until the object exists. */
const POD_UID_PENDING = "<pod uid: the Pod object is not created yet>";

function fieldValue(pod: Pod, path: string): string {
  switch (path) {
    case "metadata.namespace":
      return pod.namespace;
    case "metadata.name":
      return pod.name;
    case "metadata.uid":
      // The Pod object's uid, as a kubelet gives it (containers start once the object exists).
      return pod.api.uid ?? "";
    case "status.podIP":
      return pod.ip;
    case "status.hostIP":
      return nodeAddr;
    case "spec.nodeName":
      return cluster;
    case "spec.serviceAccountName":
      return pod.spec.serviceAccountName ?? "default";
    default: {
      const m = /^metadata\.labels\['(.+)'\]$/.exec(path);
      if (m) return pod.labels[m[1]!] ?? "";
      return "";
    }
  }
}

/** The files a volume holds now (from the informer caches), or null for emptyDir. */
function volumePayload(pod: Pod, v: k8s.V1Volume): Payload | null {
  const ns = pod.namespace;
  const payload: Payload = new Map();
  if (v.secret) {
    const name = v.secret.secretName!;
    addItems(
      payload,
      secretData(ns, name, v.secret.optional),
      v.secret.items,
      `secret ${ns}/${name}`,
      v.secret.optional,
    );
  } else if (v.configMap) {
    const name = v.configMap.name!;
    addItems(
      payload,
      configMapData(ns, name, v.configMap.optional),
      v.configMap.items,
      `configmap ${ns}/${name}`,
      v.configMap.optional,
    );
  } else if (v.downwardAPI) {
    for (const it of v.downwardAPI.items ?? [])
      if (it.fieldRef) payload.set(it.path, fieldValue(pod, it.fieldRef.fieldPath));
  } else if (v.projected) {
    for (const s of v.projected.sources ?? []) {
      if (s.secret) {
        const name = s.secret.name!;
        addItems(
          payload,
          secretData(ns, name, s.secret.optional),
          s.secret.items,
          `secret ${ns}/${name}`,
          s.secret.optional,
        );
      } else if (s.configMap) {
        const name = s.configMap.name!;
        addItems(
          payload,
          configMapData(ns, name, s.configMap.optional),
          s.configMap.items,
          `configmap ${ns}/${name}`,
          s.configMap.optional,
        );
      } else if (s.serviceAccountToken) {
        payload.set(s.serviceAccountToken.path, pod.saToken ?? "");
      } else if (s.downwardAPI) {
        for (const it of s.downwardAPI.items ?? [])
          if (it.fieldRef) payload.set(it.path, fieldValue(pod, it.fieldRef.fieldPath));
      }
    }
  } else if (v.emptyDir) {
    return null;
  } else {
    throw new Error(`volume ${v.name}: only secret, configMap, projected, downwardAPI and emptyDir are supported`);
  }
  return payload;
}

/** Rewrites Secret / ConfigMap backed volume files whose content changed (the process keeps running). */
function refreshVolumes(pod: Pod): void {
  for (const vol of pod.volumes) {
    let payload: Payload | null;
    try {
      payload = volumePayload(pod, vol.source);
    } catch (err) {
      // A real kubelet keeps the last content when the source disappears; so do we.
      log(`pod ${pod.namespace}/${pod.name} volume ${vol.source.name}: ${firstLine(err)}`);
      continue;
    }
    if (!payload || payloadDigest(payload) === vol.digest) continue;
    vol.digest = writeAtomic(vol.dir, payload);
    log(`pod ${pod.namespace}/${pod.name}: updated volume ${vol.source.name}`);
  }
}

async function prepare(pod: Pod): Promise<void> {
  const ns = pod.namespace;
  const spec = pod.spec;
  // Images first: an unmapped one is the reason the pod cannot run, whatever else is wrong.
  for (const c of spec.containers) {
    if (!entrypoint(c.image ?? ""))
      throw new Error(
        `image ${c.image} of container ${c.name} is not mapped to a local command ` +
          `(the process kubelet runs cpenv.local/node[:tag], images containing "cluster-proxy" and ` +
          `oamdev/cluster-gateway[:tag] when started with --cluster-gateway)`,
      );
  }
  rmSync(pod.dir, { recursive: true, force: true });
  mkdirSync(pod.dir, { recursive: true });
  try {
    const tr = await core.createNamespacedServiceAccountToken({
      name: spec.serviceAccountName ?? "default",
      namespace: ns,
      body: { spec: { audiences: [], expirationSeconds: 24 * 3600 } },
    });
    pod.saToken = tr.status?.token ?? "";
  } catch (err) {
    log(`no service account token for ${ns}/${pod.name}: ${firstLine(err)}`);
  }
  network.setup(pod);
  pod.volumes = [];
  const mounts = new Map<string, string>(); // volume name -> host dir
  for (const v of spec.volumes ?? []) {
    const dir = join(pod.dir, "volumes", v.name);
    mounts.set(v.name, dir);
    const payload = volumePayload(pod, v);
    if (payload) pod.volumes.push({ dir, source: v, digest: writeAtomic(dir, payload) });
    else mkdirSync(dir, { recursive: true });
  }
  // Service account token, like the projected volume a kubelet would mount.
  const saDir = join(pod.dir, "serviceaccount");
  if (spec.automountServiceAccountToken !== false) {
    writeAtomic(
      saDir,
      new Map([
        ["token", pod.saToken ?? ""],
        ["ca.crt", caPem],
        ["namespace", ns],
      ]),
    );
  }

  const subs: [string, string][] = [["/var/run/secrets/kubernetes.io/serviceaccount", saDir]];
  const containers: Container[] = [];
  for (const c of spec.containers) {
    const ep = entrypoint(c.image ?? "")!;
    const cSubs = [...subs];
    for (const m of c.volumeMounts ?? []) {
      const dir = mounts.get(m.name);
      if (!dir) throw new Error(`container ${c.name} mounts volume ${m.name}, which the pod does not define`);
      cSubs.push([m.mountPath.replace(/\/+$/, ""), m.subPath ? join(dir, m.subPath) : dir]);
    }
    const sub = substituteMountPaths(cSubs);
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: pod.dir,
      HOSTNAME: pod.name,
      // As a kubelet does: the kubernetes Service's ClusterIP (the apiserver behind the Service DNAT).
      KUBERNETES_SERVICE_HOST: services.get("kubernetes", "default")?.spec?.clusterIP ?? nodeAddr,
      KUBERNETES_SERVICE_PORT: String(services.get("kubernetes", "default")?.spec?.ports?.[0]?.port ?? APISERVER_PORT),
    };
    for (const ef of c.envFrom ?? []) {
      const data = ef.configMapRef
        ? configMapData(ns, ef.configMapRef.name!, ef.configMapRef.optional)
        : ef.secretRef
          ? secretData(ns, ef.secretRef.name!, ef.secretRef.optional)
          : null;
      for (const [k, v] of Object.entries(data ?? {})) env[`${ef.prefix ?? ""}${k}`] = v.toString();
    }
    for (const e of c.env ?? []) {
      if (e.value !== undefined) env[e.name] = sub(e.value);
      else if (e.valueFrom?.fieldRef)
        // The Pod object (its uid) may not exist yet: filled in when the container starts.
        env[e.name] =
          e.valueFrom.fieldRef.fieldPath === "metadata.uid" && !pod.api.uid
            ? POD_UID_PENDING
            : fieldValue(pod, e.valueFrom.fieldRef.fieldPath);
      else if (e.valueFrom?.secretKeyRef) {
        const r = e.valueFrom.secretKeyRef;
        const v = secretData(ns, r.name!, r.optional)?.[r.key];
        if (v !== undefined) env[e.name] = v.toString();
        else if (!r.optional) throw new Error(`secret ${ns}/${r.name} has no key ${r.key}`);
      } else if (e.valueFrom?.configMapKeyRef) {
        const r = e.valueFrom.configMapKeyRef;
        const v = configMapData(ns, r.name!, r.optional)?.[r.key];
        if (v !== undefined) env[e.name] = v.toString();
        else if (!r.optional) throw new Error(`configmap ${ns}/${r.name} has no key ${r.key}`);
      }
    }
    // $(VAR) references in command and args, as Kubernetes expands them.
    const expand = (s: string): string => s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n: string) => env[n] ?? m);
    const argv = [...ep, ...(c.command ?? []).slice(1), ...(c.args ?? [])].map((a, i) =>
      i < ep.length ? a : sub(expand(a)),
    );
    let stdinFifo: string | undefined;
    if (c.stdin) {
      stdinFifo = join(pod.dir, `${c.name}.stdin`);
      run("mkfifo", ["-m", "600", stdinFifo]);
    }
    containers.push({
      name: c.name,
      argv,
      env,
      stdinFifo,
      readiness: c.readinessProbe,
      liveness: c.livenessProbe,
      child: null,
      startedAt: 0,
      restarts: 0,
      nextStart: 0,
      ready: false,
      probing: { readiness: false, liveness: false },
      lastProbe: { readiness: 0, liveness: 0 },
      streak: { readiness: 0, liveness: 0 },
    });
  }
  pod.containers = containers;
}

function startContainer(pod: Pod, c: Container): void {
  // The process's output: the container's CRI-format log file for this run
  // (<pod dir>/logs/<container>/<restart count>.log, served by the kubelet API as a runtime's
  // would be) and, as before, everything in <pod dir>/<container>.log.
  const logDir = join(pod.dir, "logs", c.name);
  mkdirSync(logDir, { recursive: true });
  const criFd = openSync(join(logDir, `${c.restarts}.log`), "a");
  const rawFd = openSync(join(pod.dir, `${c.name}.log`), "a");
  // A FIFO opened read-write never reports end-of-file and never blocks its writers.
  const stdinFd = c.stdinFifo ? openSync(c.stdinFifo, fsConstants.O_RDWR) : null;
  // The Pod object's uid where the downward API asked for it (containers start once it exists).
  const uid = (v: string): string => v.split(POD_UID_PENDING).join(pod.api.uid ?? "");
  const argv = network.wrap(pod, mountServiceAccount(pod, c.argv.map(uid)));
  const env = Object.fromEntries(Object.entries(c.env).map(([k, v]) => [k, v === undefined ? v : uid(v)]));
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: pod.dir,
    env,
    stdio: [stdinFd ?? "ignore", "pipe", "pipe"],
  });
  if (stdinFd !== null) closeSync(stdinFd);
  const cri = new CriLogWriter((entry) => writeSync(criFd, entry));
  let open = 2;
  for (const stream of ["stdout", "stderr"] as const satisfies CriStream[]) {
    const pipe = child[stream]!;
    pipe.on("data", (chunk: Buffer) => {
      writeSync(rawFd, chunk);
      cri.push(stream, chunk);
    });
    pipe.on("close", () => {
      cri.end(stream);
      if (--open === 0) {
        closeSync(criFd);
        closeSync(rawFd);
      }
    });
  }
  c.child = child;
  c.startedAt = Date.now();
  c.ready = false;
  c.streak = { readiness: 0, liveness: 0 };
  c.lastProbe = { readiness: 0, liveness: 0 };
  log(`started ${pod.namespace}/${pod.name}/${c.name} pid ${child.pid}: ${c.argv.join(" ")}`);
  writePodInfo(pod);
  child.on("error", (err) => {
    c.lastError = err.message;
  });
  child.on("exit", (code, sig) => {
    if (c.child !== child) return;
    c.child = null;
    c.ready = false;
    c.restarts++;
    const backoff = Math.min(30_000, 1_000 * 2 ** Math.min(c.restarts - 1, 5));
    c.nextStart = Date.now() + backoff;
    c.lastError = `container ${c.name} exited ${code ?? sig}`;
    log(`${pod.namespace}/${pod.name}/${c.name} exited (${code ?? sig}); restart ${c.restarts} in ${backoff}ms`);
    if (!pod.terminating) writePodInfo(pod);
    wake();
  });
}

/**
 * <pod dir>/pod.json: what the kubelet API (test/infra/k8s/kubelet-api) needs to serve a pod's logs,
 * exec, attach and port-forward: its network namespace, and per container the process (whose
 * namespaces exec enters), the restart count (which log file is current), the environment and the
 * stdin FIFO. Replaced atomically on every change.
 */
function writePodInfo(pod: Pod): void {
  const info = {
    namespace: pod.namespace,
    name: pod.name,
    uid: pod.uid,
    netns: pod.net?.ns ?? "",
    dir: pod.dir,
    containers: pod.containers.map((c) => ({
      name: c.name,
      pid: c.child?.pid ?? 0,
      restarts: c.restarts,
      env: Object.entries(c.env)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => `${k}=${v}`),
      stdin: c.stdinFifo ?? "",
    })),
  };
  const file = join(pod.dir, "pod.json");
  try {
    writeFileSync(`${file}.tmp`, JSON.stringify(info));
    renameSync(`${file}.tmp`, file);
  } catch (err) {
    log(`pod ${pod.namespace}/${pod.name}: writing pod.json: ${firstLine(err)}`);
  }
}

function runProbe(pod: Pod, c: Container, pr: k8s.V1Probe): Promise<boolean> {
  const timeoutMs = (pr.timeoutSeconds ?? 1) * 1000;
  const port = (p: number | string | undefined): number => {
    if (typeof p === "number") return p;
    const spec = pod.spec.containers.find((x) => x.name === c.name);
    const named = spec?.ports?.find((x) => x.name === p)?.containerPort;
    return named ?? Number(p);
  };
  return new Promise((resolve) => {
    if (pr.tcpSocket) {
      const s = net.connect({ host: pod.ip, port: port(pr.tcpSocket.port) }, () => {
        s.destroy();
        resolve(true);
      });
      s.setTimeout(timeoutMs, () => {
        s.destroy();
        resolve(false);
      });
      s.on("error", () => resolve(false));
    } else if (pr.httpGet) {
      const mod = pr.httpGet.scheme === "HTTPS" ? https : http;
      const req = mod.get(
        {
          host: pod.ip,
          port: port(pr.httpGet.port),
          path: pr.httpGet.path ?? "/",
          timeout: timeoutMs,
          rejectUnauthorized: false,
          headers: Object.fromEntries((pr.httpGet.httpHeaders ?? []).map((h) => [h.name, h.value])),
        },
        (res) => {
          res.resume();
          resolve((res.statusCode ?? 500) >= 200 && (res.statusCode ?? 500) < 400);
        },
      );
      req.on("error", () => resolve(false));
      req.on("timeout", () => {
        req.destroy();
        resolve(false);
      });
    } else if (pr.exec?.command?.length) {
      // Runs in the pod's network, with the container's environment.
      const argv = network.wrap(pod, pr.exec.command);
      const r = spawnSync(argv[0]!, argv.slice(1), { env: c.env, cwd: pod.dir, timeout: timeoutMs, stdio: "ignore" });
      resolve(r.status === 0);
    } else {
      resolve(true);
    }
  });
}

/** Starts due probes (without waiting) and applies their results when they finish. */
function probeContainer(pod: Pod, c: Container): void {
  if (!c.child) {
    c.ready = false;
    return;
  }
  const now = Date.now();
  for (const kind of ["readiness", "liveness"] as const) {
    const pr = kind === "readiness" ? c.readiness : c.liveness;
    if (!pr) {
      // Without a readiness probe a container is ready once it has run for a second.
      if (kind === "readiness") c.ready = now - c.startedAt >= 1_000;
      continue;
    }
    if (c.probing[kind]) continue;
    if (now - c.startedAt < (pr.initialDelaySeconds ?? 0) * 1000) continue;
    if (now - c.lastProbe[kind] < (pr.periodSeconds ?? 10) * 1000) continue;
    c.probing[kind] = true;
    c.lastProbe[kind] = now;
    const child = c.child;
    void runProbe(pod, c, pr).then((ok) => {
      c.probing[kind] = false;
      if (c.child !== child) return;
      const s = c.streak[kind];
      c.streak[kind] = ok ? Math.max(s, 0) + 1 : Math.min(s, 0) - 1;
      if (kind === "readiness") {
        const was = c.ready;
        if (c.streak[kind] >= (pr.successThreshold ?? 1)) c.ready = true;
        if (-c.streak[kind] >= (pr.failureThreshold ?? 3)) c.ready = false;
        if (was !== c.ready) {
          log(`${pod.namespace}/${pod.name}/${c.name} ${c.ready ? "ready" : "not ready"}`);
          wake();
        }
      } else if (-c.streak[kind] >= (pr.failureThreshold ?? 3)) {
        log(`${pod.namespace}/${pod.name}/${c.name} failed its liveness probe; restarting it`);
        c.lastError = `container ${c.name} failed its liveness probe`;
        child.kill("SIGTERM");
        const t = setTimeout(() => child.kill("SIGKILL"), 5_000);
        child.once("exit", () => clearTimeout(t));
      }
    });
  }
}

const podReady = (p: Pod): boolean =>
  !p.terminating && p.prepared && p.containers.length > 0 && p.containers.every((c) => c.ready);

// The Deployment controller acts on what the apiserver shows, as the real one does: a pod counts as
// ready once its Pod object says so, and as gone once its Pod object is marked terminating. Acting
// on the processes' state alone let the Pod objects tell another story: an old pod stopped before
// the new one's Ready was written (fewer ready pods than maxUnavailable allows), or a new pod
// created while the stopped one was still listed as running (more pods than maxSurge allows).
const readyForRollout = (p: Pod): boolean => podReady(p) && p.api.readyPublished;
const goneForRollout = (p: Pod): boolean => p.terminating && !p.api.deleting;

/**
 * Marks a stopping pod's Pod object terminating (a graceful delete sets its deletionTimestamp),
 * unless it is already (a user or the garbage collector deleted it) or there is none.
 */
async function markTerminating(pod: Pod, graceMs: number): Promise<void> {
  const uid = pod.api.uid;
  if (!uid || stopping) return;
  const cur = podObjects.get(pod.name, pod.namespace);
  if (cur?.metadata?.uid === uid && cur.metadata.deletionTimestamp) return;
  pod.api.deleting = true;
  try {
    await core.deleteNamespacedPod({
      name: pod.name,
      namespace: pod.namespace,
      body: { gracePeriodSeconds: Math.max(1, Math.ceil(graceMs / 1000)), preconditions: { uid } },
    });
  } catch (err) {
    if ((err as { code?: number }).code !== 404)
      log(`marking Pod ${pod.namespace}/${pod.name} terminating: ${firstLine(err)}`);
  } finally {
    pod.api.deleting = false;
    wake();
  }
}

/** Where a stopped pod's container logs are kept, for whoever reads a failed run: `<ns>_<name>_<uid>/`. */
const stoppedPodLogs = join(workDir, "..", "stopped-pod-logs");

/** Keep `pod`'s container logs (its directory is about to go). */
function keepLogsOf(pod: Pod): void {
  try {
    const to = join(stoppedPodLogs, `${pod.namespace}_${pod.name}_${pod.uid}`);
    mkdirSync(to, { recursive: true });
    for (const c of pod.containers) {
      const from = join(pod.dir, `${c.name}.log`);
      if (existsSync(from)) renameSync(from, join(to, `${c.name}.log`));
    }
  } catch (err) {
    log(`keeping the logs of pod ${pod.namespace}/${pod.name}: ${firstLine(err)}`);
  }
}

async function stopPod(pod: Pod): Promise<void> {
  if (pod.terminating) return;
  pod.terminating = true;
  log(`stopping pod ${pod.namespace}/${pod.name}`);
  wake();
  // As a kubelet does: the pod's whole terminationGracePeriodSeconds after SIGTERM, then SIGKILL; on the
  // kubelet's own shutdown, be quick (the environment's teardown is waiting).
  const grace = stopping ? 2_000 : (pod.spec.terminationGracePeriodSeconds ?? 30) * 1000;
  const marked = markTerminating(pod, grace);
  const kids = pod.containers.map((c) => c.child).filter((c): c is ChildProcess => !!c && c.exitCode === null);
  for (const c of pod.containers) c.child = null;
  await Promise.all(
    kids.map(
      (c) =>
        new Promise<void>((resolve) => {
          // The sandbox (the pod's network) goes only once its processes are gone, so that the
          // kernel's FIN or RST of their connections reaches the peers; a SIGKILLed process is
          // waited for too (bounded: a process stuck in the kernel must not hold the kubelet).
          let killed: NodeJS.Timeout | undefined;
          const t = setTimeout(() => {
            c.kill("SIGKILL");
            killed = setTimeout(resolve, 10_000);
          }, grace);
          c.once("exit", () => {
            clearTimeout(t);
            clearTimeout(killed);
            resolve();
          });
          c.kill("SIGTERM");
        }),
    ),
  );
  try {
    network.teardown(pod);
  } catch (err) {
    log(`pod ${pod.namespace}/${pod.name} network teardown: ${firstLine(err)}`);
  }
  keepLogsOf(pod);
  rmSync(pod.dir, { recursive: true, force: true });
  await marked;
  pods.delete(pod.uid);
  if (pod.api.uid && !stopping) {
    // Twice, as the first delete of a Pod that is already being deleted gracefully (by a user or the
    // garbage collector) only shortens its grace period to 0; the second removes it.
    for (let i = 0; i < 2; i++) {
      const gone = await core
        .deleteNamespacedPod({
          name: pod.name,
          namespace: pod.namespace,
          // In the body: the client drops a query parameter whose value is 0.
          body: { gracePeriodSeconds: 0, preconditions: { uid: pod.api.uid } },
        })
        .then(
          () => false,
          (err: unknown) => {
            if ((err as { code?: number }).code === 404) return true;
            log(`deleting Pod ${pod.namespace}/${pod.name}: ${firstLine(err)}`);
            return true;
          },
        );
      if (gone) break;
    }
  }
  wake();
}

function tickPod(pod: Pod): void {
  if (pod.terminating) return;
  if (!pod.prepared) {
    // A failed preparation (e.g. a Secret volume whose Secret does not exist yet) is retried
    // after nextPrepare, as a real kubelet retries mounting.
    if (pod.preparing || Date.now() < pod.nextPrepare) return;
    pod.preparing = true;
    const undo = (): void => {
      try {
        network.teardown(pod);
      } catch (err) {
        log(`pod ${pod.namespace}/${pod.name} network teardown: ${firstLine(err)}`);
      }
    };
    prepare(pod).then(
      () => {
        pod.preparing = false;
        if (pod.terminating) {
          // Stopped while it was being prepared: stopPod() found nothing to tear down yet.
          undo();
          rmSync(pod.dir, { recursive: true, force: true });
          return;
        }
        pod.prepared = true;
        pod.error = undefined;
        pod.startedAt = Date.now();
        wake();
      },
      (err: unknown) => {
        pod.preparing = false;
        pod.error = firstLine(err);
        pod.nextPrepare = Date.now() + 2_000;
        undo();
      },
    );
    return;
  }
  refreshVolumes(pod);
  for (const c of pod.containers) {
    // As a kubelet runs the containers of a Pod object: not before the object exists (its uid).
    if (!c.child && pod.api.uid && Date.now() >= c.nextStart) startContainer(pod, c);
    probeContainer(pod, c);
  }
}

// ---------------------------------------------------------------- deployments

const lastStatus = new Map<string, string>();

function reconcileDeployment(d: k8s.V1Deployment, mine: Pod[]): void {
  const hash = templateHash(d);
  const views: PodView[] = mine.map((p) => ({
    name: p.uid,
    hash: p.hash,
    ready: readyForRollout(p),
    terminating: goneForRollout(p),
    seq: p.seq,
  }));
  let plan;
  try {
    plan = planRollout(d.spec?.replicas ?? 1, hash, d.spec?.strategy, views);
  } catch (err) {
    log(`${keyOf(d)}: ${firstLine(err)}`);
    return;
  }
  for (const uid of plan.delete) {
    const p = pods.get(uid);
    if (p) void stopPod(p);
  }
  for (let i = 0; i < plan.create; i++) newPod(d, hash);
}

async function writeStatus(d: k8s.V1Deployment, mine: Pod[]): Promise<void> {
  const key = keyOf(d);
  const hash = templateHash(d);
  const desired = d.spec?.replicas ?? 1;
  // As the Pod objects show them (see readyForRollout).
  const live = mine.filter((p) => !goneForRollout(p));
  const updated = live.filter((p) => p.hash === hash);
  const ready = live.filter(readyForRollout).length;
  const updatedReady = updated.filter(readyForRollout).length;
  const { unavailable: maxUnavailable } =
    d.spec?.strategy?.type === "Recreate" ? { unavailable: 0 } : surgeAndUnavailable(desired, d.spec?.strategy);
  const available = ready >= desired - maxUnavailable;
  const complete = updated.length === desired && live.length === desired && updatedReady === desired;
  const problem = live
    .map((p) => p.error ?? p.containers.find((c) => c.lastError && !c.ready)?.lastError)
    .find(Boolean);
  const summary = JSON.stringify([
    d.metadata?.generation,
    live.length,
    updated.length,
    ready,
    available,
    complete,
    problem ?? "",
  ]);
  if (lastStatus.get(key) === summary) return;
  const now = new Date();
  const cond = (type: string, status: boolean, reason: string, message: string): k8s.V1DeploymentCondition => ({
    type,
    status: status ? "True" : "False",
    reason,
    message,
    lastUpdateTime: now,
    lastTransitionTime: now,
  });
  const detail = `${ready}/${desired} ready${problem ? `: ${problem}` : ""}`;
  const [namespace, name] = key.split("/") as [string, string];
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const cur = await apps.readNamespacedDeploymentStatus({ name, namespace });
      const prev = Object.fromEntries((cur.status?.conditions ?? []).map((c) => [c.type, c]));
      const keep = (c: k8s.V1DeploymentCondition): k8s.V1DeploymentCondition =>
        prev[c.type]?.status === c.status ? { ...c, lastTransitionTime: prev[c.type]!.lastTransitionTime } : c;
      cur.status = {
        observedGeneration: cur.metadata?.generation,
        replicas: live.length,
        updatedReplicas: updated.length,
        readyReplicas: ready,
        availableReplicas: ready,
        unavailableReplicas: Math.max(0, desired - ready) || undefined,
        conditions: [
          keep(
            cond(
              "Available",
              available,
              available ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable",
              available ? "Deployment has minimum availability." : `process kubelet: ${detail}`,
            ),
          ),
          keep(
            cond(
              "Progressing",
              true,
              complete ? "NewReplicaSetAvailable" : "ReplicaSetUpdated",
              complete
                ? `process kubelet: ${key} (template ${hash}) has successfully progressed.`
                : `process kubelet: rolling out template ${hash}: ${updated.length} updated, ${detail}`,
            ),
          ),
        ],
      };
      await apps.replaceNamespacedDeploymentStatus({ name, namespace, body: cur });
      lastStatus.set(key, summary);
      return;
    } catch (err) {
      const code = (err as { code?: number }).code;
      if (code === 404) return;
      if (attempt === 2) log(`status update of ${key} failed: ${firstLine(err)}`);
    }
  }
}

// ---------------------------------------------------------------- Pod objects

// Each pod is mirrored by a Pod object (owned by its Deployment, nodeName = the cluster's name), so
// that `kubectl get pods -o wide`, EndpointSlice targetRefs and tests see names, addresses and
// readiness. Deleting a Pod object stops that pod (the Deployment then replaces it).

function podStatus(pod: Pod): k8s.V1PodStatus {
  const ready = podReady(pod);
  const containersReady = pod.containers.length > 0 && pod.containers.every((c) => c.ready);
  const t = new Date(pod.startedAt || Date.now());
  const cond = (type: string, ok: boolean): k8s.V1PodCondition => ({
    type,
    status: ok ? "True" : "False",
    lastTransitionTime: t,
  });
  return {
    phase: pod.prepared ? "Running" : "Pending",
    podIP: pod.ip || undefined,
    podIPs: pod.ip ? [{ ip: pod.ip }] : undefined,
    hostIP: nodeAddr,
    hostIPs: [{ ip: nodeAddr }],
    startTime: t,
    message: pod.error,
    reason: pod.error ? "ProcessKubelet" : undefined,
    conditions: [
      cond("PodScheduled", true),
      cond("Initialized", pod.prepared),
      cond("ContainersReady", containersReady),
      cond("Ready", ready),
    ],
    containerStatuses: pod.spec.containers.map((spec) => {
      const c = pod.containers.find((x) => x.name === spec.name);
      return {
        name: spec.name,
        image: spec.image ?? "",
        imageID: "",
        ready: !!c?.ready,
        started: !!c?.child,
        restartCount: c?.restarts ?? 0,
        state: c?.child
          ? { running: { startedAt: new Date(c.startedAt) } }
          : { waiting: { reason: c ? "CrashLoopBackOff" : "ContainerCreating", message: c?.lastError ?? pod.error } },
      };
    }),
  };
}

function syncPodObject(pod: Pod): void {
  if (pod.terminating || pod.api.creating) return;
  const [depNs, depName] = pod.deployment.split("/") as [string, string];
  if (!pod.api.uid) {
    if (!pod.ip && !pod.error) return; // created once it has its address (or cannot start)
    if (Date.now() < pod.api.createdAt) return; // a failed create is retried after a pause
    pod.api.creating = true;
    const body: k8s.V1Pod = {
      metadata: {
        name: pod.name,
        namespace: depNs,
        labels: pod.labels,
        annotations: pod.net ? { [NETNS_ANNOTATION]: pod.net.ns } : {},
        ownerReferences: pod.deploymentUid
          ? [{ apiVersion: "apps/v1", kind: "Deployment", name: depName, uid: pod.deploymentUid, controller: true }]
          : undefined,
      },
      spec: { ...pod.spec, nodeName: cluster },
    };
    core.createNamespacedPod({ namespace: depNs, body }).then(
      (created) => {
        pod.api.creating = false;
        pod.api.uid = created.metadata?.uid;
        pod.api.createdAt = Date.now();
        wake();
      },
      (err: unknown) => {
        pod.api.creating = false;
        pod.api.createdAt = Date.now() + 5_000; // retry later
        log(`creating Pod ${depNs}/${pod.name}: ${firstLine(err)}`);
      },
    );
    return;
  }
  const status = podStatus(pod);
  const summary = JSON.stringify([
    status.phase,
    status.podIP,
    pod.net?.ns,
    status.conditions?.map((c) => c.status),
    status.containerStatuses?.map((c) => [c.ready, c.restartCount, !!c.state?.running]),
  ]);
  if (summary === pod.api.lastStatus) return;
  pod.api.lastStatus = summary;
  // Read it typed (informer objects from watch events are plain JSON, which the client cannot send back).
  // A pod whose start was retried has a network namespace other than the one (or none) its Pod
  // object was created with: the annotation follows it.
  const netns = pod.net?.ns;
  core
    .readNamespacedPodStatus({ name: pod.name, namespace: depNs })
    .then(async (cur) => {
      const annotations = cur.metadata?.annotations ?? {};
      if (netns && annotations[NETNS_ANNOTATION] !== netns)
        cur = await core.replaceNamespacedPod({
          name: pod.name,
          namespace: depNs,
          body: { ...cur, metadata: { ...cur.metadata, annotations: { ...annotations, [NETNS_ANNOTATION]: netns } } },
        });
      return core.replaceNamespacedPodStatus({ name: pod.name, namespace: depNs, body: { ...cur, status } });
    })
    .then(() => {
      const ready = status.conditions?.find((c) => c.type === "Ready")?.status === "True";
      if (ready !== pod.api.readyPublished) {
        pod.api.readyPublished = ready;
        wake();
      }
    })
    .catch((err: unknown) => {
      pod.api.lastStatus = undefined; // retry on the next tick
      if ((err as { code?: number }).code !== 409) log(`status of Pod ${depNs}/${pod.name}: ${firstLine(err)}`);
    });
}

/** Pods whose Pod object was deleted (by a user or the garbage collector) are stopped. */
function podObjectGone(pod: Pod): boolean {
  if (!pod.api.uid) return false;
  const cur = podObjects.get(pod.name, pod.namespace);
  if (cur?.metadata?.uid === pod.api.uid) return !!cur.metadata.deletionTimestamp;
  // Missing (or another object of that name): only believe it once the informer had time to see ours.
  return Date.now() - pod.api.createdAt > 10_000;
}

// ---------------------------------------------------------------- Services

// kube-proxy (nftables DNAT over ready endpoints, services.ts), the EndpointSlice controller for
// Services with a selector, the LoadBalancer controller, and the cluster DNS with its
// kube-system/kube-dns Service.

const selectorMatches = (sel: Record<string, string>, labels: Record<string, string>): boolean =>
  Object.entries(sel).every(([k, v]) => labels[k] === v);

const sliceName = (svc: string): string => `${svc}-cpenv`;
const lastSlice = new Map<string, string>();

interface DesiredSlice {
  endpoints: k8s.V1Endpoint[];
  ports: k8s.DiscoveryV1EndpointPort[];
}

function desiredSlice(svc: k8s.V1Service): DesiredSlice | null {
  const ns = svc.metadata!.namespace!;
  const name = svc.metadata!.name!;
  const spec = svc.spec ?? {};
  if (ns === "kube-system" && name === "kube-dns") {
    return {
      endpoints: [
        { addresses: [nodeAddr], conditions: { ready: true, serving: true, terminating: false }, nodeName: cluster },
      ],
      ports: (spec.ports ?? []).map((p) => ({ name: p.name ?? "", port: 53, protocol: p.protocol ?? "TCP" })),
    };
  }
  const sel = spec.selector;
  if (!sel || Object.keys(sel).length === 0 || spec.type === "ExternalName") return null;
  const members = [...pods.values()]
    .filter((p) => p.namespace === ns && p.ip && p.prepared && selectorMatches(sel, p.labels))
    .sort((a, b) => a.name.localeCompare(b.name));
  const containerPorts = members[0]?.spec.containers.flatMap((c) => c.ports ?? []) ?? [];
  const ports: k8s.DiscoveryV1EndpointPort[] = [];
  for (const p of spec.ports ?? []) {
    const port = resolveTargetPort(p.targetPort, p.port, containerPorts);
    if (port !== null) ports.push({ name: p.name ?? "", port, protocol: p.protocol ?? "TCP" });
  }
  return {
    endpoints: members.map((p) => ({
      addresses: [p.ip],
      conditions: {
        ready: podReady(p),
        serving: !p.terminating && p.containers.every((c) => c.ready),
        terminating: p.terminating,
      },
      nodeName: cluster,
      targetRef: { kind: "Pod", name: p.name, namespace: ns, uid: p.api.uid },
    })),
    ports,
  };
}

async function syncEndpointSlices(): Promise<void> {
  const wanted = new Set<string>();
  for (const svc of services.list()) {
    const want = desiredSlice(svc);
    if (!want) continue;
    const ns = svc.metadata!.namespace!;
    const name = sliceName(svc.metadata!.name!);
    const key = `${ns}/${name}`;
    wanted.add(key);
    const json = JSON.stringify(want);
    const cur = slices.get(name, ns);
    if (cur && lastSlice.get(key) === json) continue;
    const body: k8s.V1EndpointSlice = {
      metadata: {
        name,
        namespace: ns,
        resourceVersion: cur?.metadata?.resourceVersion,
        labels: {
          "kubernetes.io/service-name": svc.metadata!.name!,
          "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
        },
        ownerReferences: [
          {
            apiVersion: "v1",
            kind: "Service",
            name: svc.metadata!.name!,
            uid: svc.metadata!.uid!,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      addressType: "IPv4",
      endpoints: want.endpoints,
      ports: want.ports,
    };
    try {
      if (cur) await discovery.replaceNamespacedEndpointSlice({ name, namespace: ns, body });
      else await discovery.createNamespacedEndpointSlice({ namespace: ns, body });
      lastSlice.set(key, json);
    } catch (err) {
      lastSlice.delete(key);
      const code = (err as { code?: number }).code;
      if (code !== 409) log(`EndpointSlice ${key}: ${firstLine(err)}`);
    }
  }
  for (const sl of slices.list()) {
    const key = `${sl.metadata?.namespace}/${sl.metadata?.name}`;
    if (sl.metadata?.labels?.["endpointslice.kubernetes.io/managed-by"] !== MANAGED_BY || wanted.has(key)) continue;
    lastSlice.delete(key);
    await discovery
      .deleteNamespacedEndpointSlice({ name: sl.metadata.name!, namespace: sl.metadata.namespace! })
      .catch(() => undefined);
  }
}

/** Ready endpoints of a Service port, from every EndpointSlice of the Service. */
function readyEndpoints(svc: k8s.V1Service, p: k8s.V1ServicePort): { ip: string; port: number }[] {
  const ns = svc.metadata!.namespace!;
  const name = svc.metadata!.name!;
  const out = new Map<string, { ip: string; port: number }>();
  for (const sl of slices.list(ns)) {
    if (sl.metadata?.labels?.["kubernetes.io/service-name"] !== name || sl.addressType !== "IPv4") continue;
    const sp = sl.ports?.find(
      (x) => (x.name ?? "") === (p.name ?? "") && (x.protocol ?? "TCP") === (p.protocol ?? "TCP"),
    );
    if (!sp?.port) continue;
    for (const e of sl.endpoints ?? []) {
      if (e.conditions?.ready === false) continue;
      for (const a of e.addresses) out.set(`${a}:${sp.port}`, { ip: a, port: sp.port });
    }
  }
  // The apiserver maintains default/kubernetes itself; until its slice is seen, it is this node.
  if (out.size === 0 && ns === "default" && name === "kubernetes") return [{ ip: nodeAddr, port: APISERVER_PORT }];
  return [...out.values()];
}

const lbHostname = (ip: string): string => `${ip.replace(/\./g, "-")}.${LB_DOMAIN}`;
const lbPoolPrefix = `${LB_POOL[cluster].split(".").slice(0, 3).join(".")}.`;

/** The LoadBalancer address a Service holds now (from its ip or its hostname), if it is ours. */
function lbAddress(svc: k8s.V1Service): string | null {
  for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
    const ip =
      ing.ip ??
      /^(\d+)-(\d+)-(\d+)-(\d+)\./
        .exec(ing.hostname ?? "")
        ?.slice(1)
        .join(".");
    if (ip?.startsWith(lbPoolPrefix)) return ip;
  }
  return null;
}

const isLb = (svc: k8s.V1Service): boolean => svc.spec?.type === "LoadBalancer" && !svc.spec.loadBalancerClass;

async function syncLoadBalancers(): Promise<void> {
  const lbs = services.list().filter(isLb);
  const used = new Set(lbs.map(lbAddress).filter((x): x is string => !!x));
  for (const svc of lbs) {
    let ip = lbAddress(svc);
    if (!ip) {
      const asked = svc.spec?.loadBalancerIP;
      if (asked?.startsWith(lbPoolPrefix) && !used.has(asked)) ip = asked;
      for (let h = 1; !ip && h <= 254; h++)
        if (!used.has(addrIn(LB_POOL[cluster], h))) ip = addrIn(LB_POOL[cluster], h);
      if (!ip) {
        log(`no free LoadBalancer address in ${LB_POOL[cluster]}`);
        continue;
      }
      used.add(ip);
    }
    const mode = svc.metadata?.annotations?.[LB_INGRESS_ANNOTATION] ?? "ip";
    const ingress: k8s.V1LoadBalancerIngress[] =
      mode === "hostname"
        ? [{ hostname: lbHostname(ip) }]
        : mode === "ip+hostname"
          ? [{ ip, hostname: lbHostname(ip) }]
          : [{ ip, ipMode: "VIP" }];
    const strip = (l: k8s.V1LoadBalancerIngress[]): string =>
      JSON.stringify(l.map((i) => [i.ip ?? "", i.hostname ?? ""]));
    if (strip(svc.status?.loadBalancer?.ingress ?? []) === strip(ingress)) continue;
    const ns = svc.metadata!.namespace!;
    const name = svc.metadata!.name!;
    try {
      // Read it typed (informer objects from watch events are plain JSON, which the client cannot send back).
      const cur = await core.readNamespacedServiceStatus({ name, namespace: ns });
      if (cur.metadata?.uid !== svc.metadata?.uid) continue;
      await core.replaceNamespacedServiceStatus({
        name,
        namespace: ns,
        body: { ...cur, status: { ...cur.status, loadBalancer: { ingress } } },
      });
      log(`LoadBalancer ${ns}/${name}: ${ingress.map((i) => i.ip ?? i.hostname).join(", ")}`);
    } catch (err) {
      if ((err as { code?: number }).code !== 409) log(`LoadBalancer status of ${ns}/${name}: ${firstLine(err)}`);
    }
  }
}

let lastRules = "";
function syncServiceRules(): void {
  const rules: ServiceRule[] = [];
  for (const svc of services.list()) {
    const spec = svc.spec;
    if (!spec || spec.type === "ExternalName") continue;
    const cip = spec.clusterIP && spec.clusterIP !== "None" ? spec.clusterIP : null;
    const lb = isLb(svc) ? lbAddress(svc) : null;
    for (const p of spec.ports ?? []) {
      const proto = (p.protocol ?? "TCP").toLowerCase() as ServiceRule["proto"];
      const frontends = [
        ...(cip ? [{ ip: cip, port: p.port }] : []),
        ...(lb ? [{ ip: lb, port: p.port }] : []),
        ...(p.nodePort ? [{ ip: nodeAddr, port: p.nodePort }] : []),
      ];
      if (frontends.length === 0) continue;
      rules.push({
        id: `${svc.metadata!.namespace}/${svc.metadata!.name}/${p.name ?? p.port}`,
        proto,
        frontends,
        endpoints: readyEndpoints(svc, p),
      });
    }
  }
  const text = renderServiceTable(nodeAddr, rules);
  if (text === lastRules) return;
  const r = run("nft", ["-f", "-"], { input: text, allowFail: true, timeoutMs: 15_000 });
  if (r.status !== 0) {
    log(`nft failed: ${r.stderr.trim().split("\n").slice(0, 3).join(" | ")}`);
    return;
  }
  lastRules = text;
}

/** A ClusterIP Service's address, or a headless one's ready endpoints; null when there is none. */
function dnsLookup(ns: string, name: string): string[] | null {
  const svc = services.get(name, ns);
  if (!svc?.spec) return null;
  // An ExternalName Service: a cluster DNS answers a CNAME to its name; we serve no names outside
  // the cluster, so only an IPv4 literal resolves (to itself, where a client following the CNAME ends up).
  if (svc.spec.type === "ExternalName")
    return net.isIPv4(svc.spec.externalName ?? "") ? [svc.spec.externalName!] : null;
  if (svc.spec.clusterIP && svc.spec.clusterIP !== "None") return [svc.spec.clusterIP];
  const ips = new Set<string>();
  for (const sl of slices.list(ns)) {
    if (sl.metadata?.labels?.["kubernetes.io/service-name"] !== name) continue;
    for (const e of sl.endpoints ?? []) if (e.conditions?.ready !== false) for (const a of e.addresses) ips.add(a);
  }
  return [...ips];
}

async function ensureDnsService(): Promise<void> {
  const body: k8s.V1Service = {
    metadata: { name: "kube-dns", namespace: "kube-system", labels: { "k8s-app": "kube-dns" } },
    spec: {
      clusterIP: dnsServiceIp(cluster),
      ports: [
        { name: "dns", port: 53, protocol: "UDP", targetPort: 53 },
        { name: "dns-tcp", port: 53, protocol: "TCP", targetPort: 53 },
      ],
    },
  };
  try {
    await core.createNamespacedService({ namespace: "kube-system", body });
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
  }
}

// ---------------------------------------------------------------- Node

/**
 * The cluster's one Node object, named after the cluster (every Pod's spec.nodeName), as a
 * kubelet registers its node: the address kube-apiserver reaches the kubelet API on (InternalIP,
 * the node's address), daemonEndpoints.kubeletEndpoint (the kubelet-api peer's port), capacity
 * and the Ready condition. No node lifecycle controller runs, so nothing marks it NotReady.
 */
async function ensureNode(): Promise<void> {
  const arch = process.arch === "x64" ? "amd64" : process.arch;
  try {
    await core.createNode({
      body: {
        metadata: {
          name: cluster,
          labels: {
            "kubernetes.io/hostname": cluster,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch,
            "app.kubernetes.io/managed-by": MANAGED_BY,
          },
        },
      },
    });
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
  }
  const now = new Date();
  const capacity = {
    cpu: String(os.availableParallelism()),
    memory: `${Math.floor(os.totalmem() / 1024)}Ki`,
    pods: "253",
  };
  const cur = await core.readNodeStatus({ name: cluster });
  await core.replaceNodeStatus({
    name: cluster,
    body: {
      ...cur,
      status: {
        addresses: [
          { type: "InternalIP", address: nodeAddr },
          { type: "Hostname", address: cluster },
        ],
        daemonEndpoints: { kubeletEndpoint: { Port: KUBELET_PORT } },
        capacity,
        allocatable: capacity,
        conditions: [
          {
            type: "Ready",
            status: "True",
            reason: "KubeletReady",
            message: "process kubelet is posting ready status",
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ],
        nodeInfo: {
          architecture: arch,
          operatingSystem: "linux",
          osImage: "cluster-proxy test environment",
          kernelVersion: os.release(),
          kubeletVersion: "v0.0.0-process-kubelet",
          kubeProxyVersion: "",
          containerRuntimeVersion: "process://local",
          machineID: "",
          systemUUID: "",
          bootID: "",
        },
      },
    },
  });
  log(`Node ${cluster} registered (${nodeAddr}, kubelet API port ${KUBELET_PORT})`);
}

let stopping = false;
const orphansDeleted = new Set<string>();

async function syncAll(): Promise<void> {
  const byKey = new Map<string, Pod[]>();
  for (const p of pods.values()) {
    const l = byKey.get(p.deployment) ?? [];
    l.push(p);
    byKey.set(p.deployment, l);
  }
  const seen = new Set<string>();
  for (const d of deployments.list()) {
    if (d.metadata?.deletionTimestamp) continue;
    const key = keyOf(d);
    seen.add(key);
    reconcileDeployment(d, byKey.get(key) ?? []);
  }
  for (const p of pods.values()) {
    if (!seen.has(p.deployment) && !p.terminating) {
      log(`${p.deployment} deleted; stopping pod ${p.name}`);
      void stopPod(p);
    }
  }
  for (const p of [...pods.values()]) {
    if (!p.terminating && podObjectGone(p)) {
      log(`Pod ${p.namespace}/${p.name} was deleted; stopping it`);
      void stopPod(p);
    }
  }
  for (const p of [...pods.values()]) {
    tickPod(p);
    syncPodObject(p);
  }
  // Pod objects on this node that no pod of ours backs (left by an earlier kubelet): remove them.
  const known = new Set([...pods.values()].map((p) => `${p.namespace}/${p.name}`));
  for (const o of podObjects.list()) {
    const key = `${o.metadata?.namespace}/${o.metadata?.name}`;
    // Informer objects from watch events are plain JSON: timestamps are strings there.
    const age =
      Date.now() - new Date((o.metadata?.creationTimestamp as Date | string | undefined) ?? Date.now()).getTime();
    if (o.spec?.nodeName !== cluster || known.has(key) || age < 30_000 || orphansDeleted.has(key)) continue;
    orphansDeleted.add(key);
    log(`removing Pod ${key}, which no pod of this kubelet backs`);
    for (let i = 0; i < 2; i++)
      await core
        .deleteNamespacedPod({
          name: o.metadata!.name!,
          namespace: o.metadata!.namespace!,
          body: { gracePeriodSeconds: 0 },
        })
        .catch(() => undefined);
  }
  await syncLoadBalancers();
  await syncEndpointSlices();
  syncServiceRules();
  // Status after the pods moved on (pods may have been created or stopped just now).
  const after = new Map<string, Pod[]>();
  for (const p of pods.values()) after.set(p.deployment, [...(after.get(p.deployment) ?? []), p]);
  for (const d of deployments.list()) {
    if (!d.metadata?.deletionTimestamp) await writeStatus(d, after.get(keyOf(d)) ?? []);
  }
  for (const k of lastStatus.keys()) if (!seen.has(k)) lastStatus.delete(k);
}

async function main(): Promise<void> {
  mkdirSync(workDir, { recursive: true });
  log(`running every Deployment in ${cluster} (work dir ${workDir})`);
  const shutdown = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    kick?.();
    await Promise.all([...pods.values()].map((p) => stopPod(p)));
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown());
  process.on("SIGINT", () => void shutdown());
  for (const inf of [secrets, configMaps, services, slices, podObjects, deployments] as const) {
    for (let attempt = 1; ; attempt++) {
      try {
        await inf.start();
        break;
      } catch (err) {
        if (attempt >= 60) throw err;
        log(`informer start failed (${firstLine(err)}); retrying`);
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  }
  await ensureDnsService();
  await ensureNode();
  // The cluster DNS, on the node's address (kube-system/kube-dns forwards its ClusterIP here).
  const dns = await serveDns(nodeAddr, 53, clusterResolver(dnsLookup));
  log(`cluster DNS on ${nodeAddr}:53 (Service kube-system/kube-dns ${dnsServiceIp(cluster)})`);
  while (!stopping) {
    try {
      await syncAll();
    } catch (err) {
      log(`sync failed: ${firstLine(err)}`);
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 500);
      kick = () => {
        clearTimeout(t);
        resolve();
      };
    });
    kick = null;
  }
  await dns.close();
}

main().catch((err: unknown) => {
  log(`fatal: ${firstLine(err)}`);
  process.exit(1);
});
