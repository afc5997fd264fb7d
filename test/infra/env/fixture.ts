// Test helper: brings the multi-cluster environment up once per suite (or reuses a running one)
// and hands out kubeconfigs and @kubernetes/client-node clients for hub, mc1 and mc2.
//
// The test runner may run in a namespace of its own (scripts/test.sh: cp-test-<pid>, loopback
// only), so clients cannot route to the clusters' addresses. Instead the environment runs a bridge
// in the lab namespace that listens on Unix sockets (files: reachable from any network namespace),
// and this fixture listens on 127.0.0.1 in the caller's namespace and pipes to those sockets. The
// apiserver certificates carry IP:127.0.0.1, so TLS verification stays on.
import * as k8s from "@kubernetes/client-node";
import { readFileSync } from "node:fs";
import net from "node:net";
import { CLUSTERS, type ClusterName, MANAGED, NETNS_ANNOTATION, nsOf, paths, stateDir } from "./config.js";
import { type RunResult, runIn } from "./exec.js";
import { type EnvOptions, type EnvState, down, log, up } from "./environment.js";
import { setBlackhole, setHubApiserverOnly } from "./network.js";
import { pkiFile } from "./pki.js";

export interface TestEnv {
  /** Directory with hub/mc1/mc2.kubeconfig (addresses routable from the lab namespace) and `kubectl`. */
  dir: string;
  state: EnvState;
  /** true when an environment that was already running was reused (then close() leaves it running). */
  reused: boolean;
  /** kubeconfig file for the lab namespace (use with env.kubectl or inLab). */
  kubeconfigPath(c: ClusterName): string;
  /** A KubeConfig usable from the calling process (through the local forwarder). */
  kubeConfig(c: ClusterName): k8s.KubeConfig;
  core(c: ClusterName): k8s.CoreV1Api;
  apps(c: ClusterName): k8s.AppsV1Api;
  custom(c: ClusterName): k8s.CustomObjectsApi;
  /** kubectl against cluster `c`, run in the lab namespace. */
  kubectl(c: ClusterName, args: string[], opts?: { input?: string; allowFail?: boolean }): RunResult;
  /** Runs a command inside one of the environment's namespaces. */
  exec(
    where: ClusterName | "lab",
    cmd: string,
    args: string[],
    opts?: { timeoutMs?: number; allowFail?: boolean },
  ): RunResult;
  /**
   * Runs a command inside a pod's own network namespace (and with its /etc/resolv.conf: cluster
   * DNS), found from the Pod object that the process kubelet writes.
   */
  podExec(
    c: ClusterName,
    namespace: string,
    pod: string,
    cmd: string,
    args: string[],
    opts?: { timeoutMs?: number; allowFail?: boolean },
  ): Promise<RunResult>;
  /**
   * Silently drops every packet between managed cluster `mc` and the hub (on) or lifts that
   * (off); see network.ts setBlackhole. Lifted again by close() if left on.
   */
  blackhole(mc: "mc1" | "mc2", on: boolean): void;
  /**
   * Lets `mc` reach the hub only at its kube-apiserver port (on), or lifts that (off); see
   * network.ts setHubApiserverOnly. Lifted again by close() if left on.
   */
  hubApiserverOnly(mc: "mc1" | "mc2", on: boolean): void;
  /** Stops the forwarders; tears the environment down if this fixture started it (unless CPENV_KEEP=1). */
  close(): Promise<void>;
}

const openSockets = new Set<net.Socket>();

function forwarder(socketPath: string): Promise<net.Server> {
  const server = net.createServer((c) => {
    const up = net.connect(socketPath);
    openSockets.add(c);
    openSockets.add(up);
    c.pipe(up).pipe(c);
    const close = (): void => {
      c.destroy();
      up.destroy();
      openSockets.delete(c);
      openSockets.delete(up);
    };
    c.on("error", close);
    up.on("error", close);
    c.on("close", close);
    up.on("close", close);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

/** Bring the environment up (or reuse it) with the optional parts `options` asks for. */
export async function startTestEnv(options: EnvOptions = {}): Promise<TestEnv> {
  const { state, reused } = await up({ owner: "fixture", ...options });
  const servers = new Map<ClusterName, net.Server>();
  const configs = new Map<ClusterName, k8s.KubeConfig>();
  try {
    for (const c of CLUSTERS) {
      const s = await forwarder(paths.bridgeSocket(c));
      servers.set(c, s);
      const port = (s.address() as net.AddressInfo).port;
      const kc = new k8s.KubeConfig();
      kc.loadFromOptions({
        clusters: [
          {
            name: c,
            server: `https://127.0.0.1:${port}`,
            caData: readFileSync(pkiFile(c, "ca.crt")).toString("base64"),
            skipTLSVerify: false,
          },
        ],
        users: [
          {
            name: "cpenv-admin",
            certData: readFileSync(pkiFile(c, "admin.crt")).toString("base64"),
            keyData: readFileSync(pkiFile(c, "admin.key")).toString("base64"),
          },
        ],
        contexts: [{ name: c, cluster: c, user: "cpenv-admin" }],
        currentContext: c,
      });
      configs.set(c, kc);
    }
  } catch (err) {
    for (const s of servers.values()) s.close();
    if (!reused) await down();
    throw err;
  }
  const kcOf = (c: ClusterName): k8s.KubeConfig => configs.get(c)!;
  let closed = false;
  return {
    dir: stateDir,
    state,
    reused,
    kubeconfigPath: (c) => paths.kubeconfig(c),
    kubeConfig: kcOf,
    core: (c) => kcOf(c).makeApiClient(k8s.CoreV1Api),
    apps: (c) => kcOf(c).makeApiClient(k8s.AppsV1Api),
    custom: (c) => kcOf(c).makeApiClient(k8s.CustomObjectsApi),
    kubectl: (c, args, opts = {}) =>
      runIn(
        nsOf("lab"),
        `${state.binDir}/kubectl`,
        ["--kubeconfig", paths.kubeconfig(c), "--request-timeout=20s", ...args],
        {
          input: opts.input,
          allowFail: opts.allowFail,
        },
      ),
    exec: (where, cmd, args, opts = {}) =>
      runIn(nsOf(where), cmd, args, { timeoutMs: opts.timeoutMs ?? 30_000, allowFail: opts.allowFail }),
    podExec: async (c, namespace, pod, cmd, args, opts = {}) => {
      const p = await kcOf(c).makeApiClient(k8s.CoreV1Api).readNamespacedPod({ name: pod, namespace });
      const netns = p.metadata?.annotations?.[NETNS_ANNOTATION];
      if (!netns) throw new Error(`pod ${namespace}/${pod} in ${c} has no network namespace (hostNetwork?)`);
      return runIn(netns, cmd, args, { timeoutMs: opts.timeoutMs ?? 30_000, allowFail: opts.allowFail });
    },
    blackhole: (mc, on) => setBlackhole(mc, on),
    hubApiserverOnly: (mc, on) => setHubApiserverOnly(mc, on),
    close: async () => {
      if (closed) return;
      closed = true;
      for (const mc of MANAGED) {
        setBlackhole(mc as "mc1" | "mc2", false);
        setHubApiserverOnly(mc as "mc1" | "mc2", false);
      }
      for (const s of servers.values()) s.close();
      for (const s of openSockets) s.destroy();
      if (!reused && process.env.CPENV_KEEP !== "1") {
        log("tearing the environment down");
        await down();
      }
    },
  };
}

/** What {@link nodeScriptDeployment} runs. */
export interface NodeScriptApp {
  /** The Deployment's name and its pods' label `app`. */
  name: string;
  /** The program, run as `node -e <script>` in image cpenv.local/node. */
  script: string;
  /** Default `app`. */
  containerName?: string;
  /** The container's port (the script listens there); `portName` names it. */
  port: number;
  portName?: string;
  /** Environment besides POD_NAME (the pod's name). */
  env?: k8s.V1EnvVar[];
  /** Keep the container's stdin open (for kubectl attach). */
  stdin?: boolean;
  /** Ready once `port` accepts connections (probed every second). */
  readiness?: boolean;
}

/** A one-replica Deployment of a node script for the environment's process kubelets. */
export function nodeScriptDeployment(app: NodeScriptApp): k8s.V1Deployment {
  return {
    metadata: { name: app.name },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app: app.name } },
      template: {
        metadata: { labels: { app: app.name } },
        spec: {
          containers: [
            {
              name: app.containerName ?? "app",
              image: "cpenv.local/node",
              command: ["node", "-e", app.script],
              ...(app.stdin ? { stdin: true } : {}),
              ports: [{ containerPort: app.port, ...(app.portName ? { name: app.portName } : {}) }],
              env: [{ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }, ...(app.env ?? [])],
              ...(app.readiness ? { readinessProbe: { tcpSocket: { port: app.port }, periodSeconds: 1 } } : {}),
            },
          ],
        },
      },
    },
  };
}
