// The process kubelet: there is no real kubelet (nor container runtime) in the test environment,
// so this watches Deployments labelled `cpenv.cluster-proxy.io/process-kubelet` in one cluster's
// apiserver and runs each replica's containers as local processes in that cluster's network
// namespace (it is itself started there), restarting them on exit, and writes pod-like readiness
// back into the Deployment's status.
//
//   node --conditions=source --import tsx test/env/kubelet.ts --cluster=mc1 --kubeconfig=F --work-dir=D
//
// Mapping (see docs/test-environment.md):
//   image "cpenv.local/node[:tag]"      -> node (this Node.js)
//   image containing "cluster-proxy"    -> node <repo>/packages/cli/dist/main.js
//   argv = entrypoint + container.command[1:] + container.args
//   secret / configMap / emptyDir volumes are written to files under the work dir; every
//   occurrence of a volumeMount's mountPath in command, args and env values is replaced by that
//   directory (no mount namespaces: the files cannot appear at the container path itself).
//   The pod's service account token, ca.crt and namespace are written the same way and
//   /var/run/secrets/kubernetes.io/serviceaccount is rewritten to them; KUBERNETES_SERVICE_HOST/PORT
//   point at this cluster's apiserver.
import * as k8s from "@kubernetes/client-node";
import { NODE_FLAGS } from "@cluster-proxy/cli";
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, openSync, closeSync, rmSync, writeFileSync } from "node:fs";
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { join } from "node:path";
import { APISERVER_PORT, type ClusterName, HOST_ADDR, KUBELET_LABEL, repoRoot } from "./config.js";

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
const caPem =
  readFileSync(kc.getCurrentCluster()!.caFile ?? "/dev/null", "utf8") ||
  Buffer.from(kc.getCurrentCluster()!.caData ?? "", "base64").toString();

const log = (m: string): void => {
  process.stdout.write(`${new Date().toISOString()} process-kubelet[${cluster}]: ${m}\n`);
};

interface Proc {
  container: string;
  child: ChildProcess | null;
  startedAt: number;
  restarts: number;
  nextStart: number;
  ready: boolean;
  lastError?: string;
}

interface Replica {
  index: number;
  dir: string;
  procs: Proc[];
  argvs: { name: string; argv: string[]; env: NodeJS.ProcessEnv; probe?: k8s.V1Probe }[] | null;
  error?: string;
}

interface Workload {
  key: string;
  hash: string;
  dep: k8s.V1Deployment;
  replicas: Replica[];
  lastStatus?: string;
}

const workloads = new Map<string, Workload>();

function entrypoint(image: string): string[] | null {
  if (/^cpenv\.local\/node(:.*)?$/.test(image)) return [process.execPath];
  if (image.includes("cluster-proxy"))
    return [process.execPath, ...NODE_FLAGS, join(repoRoot, "packages", "cli", "dist", "main.js")];
  return null;
}

function specHash(d: k8s.V1Deployment): string {
  return createHash("sha256")
    .update(JSON.stringify([d.spec?.replicas ?? 1, d.spec?.template]))
    .digest("hex")
    .slice(0, 12);
}

async function prepare(d: k8s.V1Deployment, r: Replica): Promise<void> {
  const ns = d.metadata!.namespace!;
  const pod = d.spec!.template.spec!;
  const podName = `${d.metadata!.name}-${r.index}`;
  rmSync(r.dir, { recursive: true, force: true });
  mkdirSync(r.dir, { recursive: true });
  const mounts = new Map<string, string>(); // volume name -> host dir
  for (const v of pod.volumes ?? []) {
    const dir = join(r.dir, "volumes", v.name);
    mkdirSync(dir, { recursive: true });
    mounts.set(v.name, dir);
    if (v.secret) {
      const s = await core.readNamespacedSecret({ name: v.secret.secretName!, namespace: ns });
      const items = v.secret.items ?? Object.keys(s.data ?? {}).map((k) => ({ key: k, path: k }));
      for (const it of items) {
        const val = s.data?.[it.key];
        if (val !== undefined) writeFileSync(join(dir, it.path), Buffer.from(val, "base64"));
      }
    } else if (v.configMap) {
      const cm = await core.readNamespacedConfigMap({ name: v.configMap.name!, namespace: ns });
      const items = v.configMap.items ?? Object.keys(cm.data ?? {}).map((k) => ({ key: k, path: k }));
      for (const it of items) {
        const val = cm.data?.[it.key];
        if (val !== undefined) writeFileSync(join(dir, it.path), val);
      }
    }
  }
  // Service account token (TokenRequest), like the projected volume a kubelet would mount.
  const saDir = join(r.dir, "serviceaccount");
  mkdirSync(saDir, { recursive: true });
  try {
    const tr = await core.createNamespacedServiceAccountToken({
      name: pod.serviceAccountName ?? "default",
      namespace: ns,
      body: { spec: { audiences: [], expirationSeconds: 24 * 3600 } },
    });
    writeFileSync(join(saDir, "token"), tr.status?.token ?? "");
  } catch (err) {
    log(`no service account token for ${ns}/${podName}: ${(err as Error).message.split("\n")[0]}`);
  }
  writeFileSync(join(saDir, "ca.crt"), caPem);
  writeFileSync(join(saDir, "namespace"), ns);

  const subs: [string, string][] = [["/var/run/secrets/kubernetes.io/serviceaccount", saDir]];
  r.argvs = [];
  for (const c of pod.containers) {
    const ep = entrypoint(c.image ?? "");
    if (!ep) throw new Error(`image ${c.image} of container ${c.name} is not mapped to a local command`);
    const cSubs = [...subs];
    for (const m of c.volumeMounts ?? []) {
      const dir = mounts.get(m.name);
      if (dir) cSubs.push([m.mountPath.replace(/\/+$/, ""), m.subPath ? join(dir, m.subPath) : dir]);
    }
    cSubs.sort((a, b) => b[0].length - a[0].length);
    const sub = (s: string): string => {
      for (const [from, to] of cSubs) s = s.split(from).join(to);
      return s;
    };
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: r.dir,
      HOSTNAME: podName,
      KUBERNETES_SERVICE_HOST: HOST_ADDR[cluster],
      KUBERNETES_SERVICE_PORT: String(APISERVER_PORT),
    };
    for (const ef of c.envFrom ?? []) {
      if (ef.configMapRef) {
        const cm = await core.readNamespacedConfigMap({ name: ef.configMapRef.name!, namespace: ns });
        for (const [k, v] of Object.entries(cm.data ?? {})) env[`${ef.prefix ?? ""}${k}`] = v;
      } else if (ef.secretRef) {
        const s = await core.readNamespacedSecret({ name: ef.secretRef.name!, namespace: ns });
        for (const [k, v] of Object.entries(s.data ?? {}))
          env[`${ef.prefix ?? ""}${k}`] = Buffer.from(v, "base64").toString();
      }
    }
    for (const e of c.env ?? []) {
      if (e.value !== undefined) env[e.name] = sub(e.value);
      else if (e.valueFrom?.fieldRef) {
        const f = e.valueFrom.fieldRef.fieldPath;
        env[e.name] =
          f === "metadata.namespace"
            ? ns
            : f === "metadata.name"
              ? podName
              : f === "status.podIP"
                ? HOST_ADDR[cluster]
                : f === "spec.nodeName"
                  ? cluster
                  : "";
      } else if (e.valueFrom?.secretKeyRef) {
        const s = await core.readNamespacedSecret({ name: e.valueFrom.secretKeyRef.name!, namespace: ns });
        const v = s.data?.[e.valueFrom.secretKeyRef.key];
        if (v !== undefined) env[e.name] = Buffer.from(v, "base64").toString();
      } else if (e.valueFrom?.configMapKeyRef) {
        const cm = await core.readNamespacedConfigMap({ name: e.valueFrom.configMapKeyRef.name!, namespace: ns });
        const v = cm.data?.[e.valueFrom.configMapKeyRef.key];
        if (v !== undefined) env[e.name] = v;
      }
    }
    const argv = [...ep, ...(c.command ?? []).slice(1).map(sub), ...(c.args ?? []).map(sub)];
    r.argvs.push({ name: c.name, argv, env, probe: c.readinessProbe });
  }
}

function startProc(w: Workload, r: Replica, i: number): void {
  const spec = r.argvs![i]!;
  const p = r.procs[i]!;
  const logFile = join(r.dir, `${spec.name}.log`);
  const fd = openSync(logFile, "a");
  const child = spawn(spec.argv[0]!, spec.argv.slice(1), { cwd: r.dir, env: spec.env, stdio: ["ignore", fd, fd] });
  closeSync(fd);
  p.child = child;
  p.startedAt = Date.now();
  p.ready = false;
  log(`started ${w.key}#${r.index}/${spec.name} pid ${child.pid}: ${spec.argv.join(" ")}`);
  child.on("error", (err) => {
    p.lastError = err.message;
  });
  child.on("exit", (code, sig) => {
    if (p.child !== child) return;
    p.child = null;
    p.ready = false;
    p.restarts++;
    const backoff = Math.min(30_000, 1_000 * 2 ** Math.min(p.restarts - 1, 5));
    p.nextStart = Date.now() + backoff;
    p.lastError = `exited ${code ?? sig}`;
    log(`${w.key}#${r.index}/${spec.name} exited (${code ?? sig}); restart ${p.restarts} in ${backoff}ms`);
  });
}

function probe(pr: k8s.V1Probe | undefined, p: Proc): Promise<boolean> {
  if (!p.child) return Promise.resolve(false);
  if (!pr) return Promise.resolve(Date.now() - p.startedAt >= 1_000);
  if (Date.now() - p.startedAt < (pr.initialDelaySeconds ?? 0) * 1000) return Promise.resolve(false);
  const port = Number(pr.tcpSocket?.port ?? pr.httpGet?.port);
  return new Promise((resolve) => {
    const done = (ok: boolean): void => resolve(ok);
    if (pr.tcpSocket) {
      const s = net.connect({ host: "127.0.0.1", port }, () => {
        s.destroy();
        done(true);
      });
      s.setTimeout(1_000, () => {
        s.destroy();
        done(false);
      });
      s.on("error", () => done(false));
    } else if (pr.httpGet) {
      const mod = pr.httpGet.scheme === "HTTPS" ? https : http;
      const req = mod.get(
        { host: "127.0.0.1", port, path: pr.httpGet.path ?? "/", timeout: 1_000, rejectUnauthorized: false },
        (res) => {
          res.resume();
          done((res.statusCode ?? 500) >= 200 && (res.statusCode ?? 500) < 400);
        },
      );
      req.on("error", () => done(false));
      req.on("timeout", () => {
        req.destroy();
        done(false);
      });
    } else {
      done(Date.now() - p.startedAt >= 1_000); // exec probes: running is ready
    }
  });
}

function stopReplica(r: Replica): Promise<void> {
  const kids = r.procs.map((p) => p.child).filter((c): c is ChildProcess => !!c && c.exitCode === null);
  for (const p of r.procs) p.child = null;
  return Promise.all(
    kids.map(
      (c) =>
        new Promise<void>((resolve) => {
          const t = setTimeout(() => {
            c.kill("SIGKILL");
            resolve();
          }, 5_000);
          c.once("exit", () => {
            clearTimeout(t);
            resolve();
          });
          c.kill("SIGTERM");
        }),
    ),
  ).then(() => undefined);
}

async function stopWorkload(w: Workload): Promise<void> {
  await Promise.all(w.replicas.map(stopReplica));
}

function newWorkload(key: string, d: k8s.V1Deployment): Workload {
  const n = d.spec?.replicas ?? 1;
  const containers = d.spec?.template.spec?.containers ?? [];
  return {
    key,
    hash: specHash(d),
    dep: d,
    replicas: Array.from({ length: n }, (_, index) => ({
      index,
      dir: join(workDir, key.replace("/", "_"), String(index)),
      argvs: null,
      procs: containers.map((c) => ({
        container: c.name,
        child: null,
        startedAt: 0,
        restarts: 0,
        nextStart: 0,
        ready: false,
      })),
    })),
  };
}

async function tick(w: Workload): Promise<void> {
  for (const r of w.replicas) {
    if (!r.argvs) {
      try {
        await prepare(w.dep, r);
        r.error = undefined;
      } catch (err) {
        r.error = (err as Error).message.split("\n")[0];
        r.argvs = null;
        continue;
      }
    }
    for (let i = 0; i < r.procs.length; i++) {
      const p = r.procs[i]!;
      if (!p.child && Date.now() >= p.nextStart) startProc(w, r, i);
      p.ready = await probe(r.argvs![i]!.probe, p);
    }
  }
  await writeStatus(w);
}

async function writeStatus(w: Workload): Promise<void> {
  const want = w.replicas.length;
  const ready = w.replicas.filter((r) => r.procs.length > 0 && r.procs.every((p) => p.ready)).length;
  const errors = w.replicas
    .map((r) => r.error ?? r.procs.find((p) => p.lastError && !p.ready)?.lastError)
    .filter(Boolean);
  const available = ready >= want;
  const [ns, name] = w.key.split("/") as [string, string];
  const summary = JSON.stringify([w.dep.metadata?.generation, want, ready, errors[0] ?? ""]);
  if (summary === w.lastStatus) return;
  const now = new Date();
  const cond = (type: string, status: boolean, reason: string, message: string): k8s.V1DeploymentCondition => ({
    type,
    status: status ? "True" : "False",
    reason,
    message,
    lastUpdateTime: now,
    lastTransitionTime: now,
  });
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const cur = await apps.readNamespacedDeploymentStatus({ name, namespace: ns });
      cur.status = {
        observedGeneration: cur.metadata?.generation,
        replicas: want,
        updatedReplicas: want,
        readyReplicas: ready,
        availableReplicas: ready,
        unavailableReplicas: want - ready || undefined,
        conditions: [
          cond(
            "Available",
            available,
            available ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable",
            available
              ? "Deployment has minimum availability."
              : `process kubelet: ${ready}/${want} ready${errors[0] ? `: ${errors[0]}` : ""}`,
          ),
          cond("Progressing", true, available ? "NewReplicaSetAvailable" : "ReplicaSetUpdated", "process kubelet"),
        ],
      };
      await apps.replaceNamespacedDeploymentStatus({ name, namespace: ns, body: cur });
      w.lastStatus = summary;
      return;
    } catch (err) {
      const code = (err as { code?: number }).code;
      if (code === 404) return;
      if (attempt === 2) log(`status update of ${w.key} failed: ${(err as Error).message.split("\n")[0]}`);
    }
  }
}

let stopping = false;

async function syncAll(list: k8s.V1Deployment[]): Promise<void> {
  const seen = new Set<string>();
  for (const d of list) {
    if (d.metadata?.deletionTimestamp) continue;
    const key = `${d.metadata!.namespace}/${d.metadata!.name}`;
    seen.add(key);
    const h = specHash(d);
    let w = workloads.get(key);
    if (w && w.hash !== h) {
      log(`${key} changed; restarting its processes`);
      await stopWorkload(w);
      w = undefined;
    }
    if (!w) {
      w = newWorkload(key, d);
      workloads.set(key, w);
    }
    w.dep = d;
  }
  for (const [key, w] of workloads) {
    if (!seen.has(key)) {
      log(`${key} deleted; stopping its processes`);
      workloads.delete(key);
      await stopWorkload(w);
      for (const r of w.replicas) rmSync(r.dir, { recursive: true, force: true });
    }
  }
  for (const w of workloads.values()) await tick(w);
}

// List every second plus a watch that triggers an immediate sync on any change: simple, and
// resilient to watch drops without any informer state.
let kick: (() => void) | null = null;
async function watchLoop(): Promise<void> {
  const watch = new k8s.Watch(kc);
  while (!stopping) {
    await new Promise<void>((resolve) => {
      watch
        .watch(
          "/apis/apps/v1/deployments",
          { labelSelector: KUBELET_LABEL, allowWatchBookmarks: false },
          () => kick?.(),
          () => resolve(),
        )
        .catch(() => resolve());
    });
    await new Promise((r) => setTimeout(r, 1_000));
  }
}

async function main(): Promise<void> {
  mkdirSync(workDir, { recursive: true });
  log(`watching Deployments labelled ${KUBELET_LABEL} (work dir ${workDir})`);
  void watchLoop();
  const shutdown = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await Promise.all([...workloads.values()].map(stopWorkload));
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown());
  process.on("SIGINT", () => void shutdown());
  while (!stopping) {
    try {
      const list = await apps.listDeploymentForAllNamespaces({ labelSelector: KUBELET_LABEL });
      await syncAll(list.items);
    } catch (err) {
      log(`sync failed: ${(err as Error).message.split("\n")[0]}`);
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 1_000);
      kick = () => {
        clearTimeout(t);
        resolve();
      };
    });
    kick = null;
  }
}

void main();
