/**
 * The PortForward entrypoint, agent side: {@link HubAccess} (the hub kubeconfig, re-read at each use),
 * {@link openHubTunnel} (the upgrade through the hub apiserver) and {@link ReplicaWatch} (ready replicas).
 * Design: docs/design/portforward.md#the-path
 */
import * as https from "node:https";
import type * as net from "node:net";
import { AGENT_UPGRADE_PROTOCOL, ConfigError } from "@cluster-proxy/api";
import { ConnectError } from "@cluster-proxy/tunnel";
import { delay, type Logger } from "@cluster-proxy/kit";
import type { KubeApiConfig, KubeObject, SupervisedWatch } from "@cluster-proxy/kube";
import { apiStatusMessage } from "../kube-status.js";
import { errorMessage } from "@cluster-proxy/errors";

/** What a request to the hub apiserver needs. */
export interface HubEndpoint {
  /** `https://host:port` (no path). */
  server: URL;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/** The hub apiserver and the agent's credentials, from `--hub-kubeconfig`. */
export class HubAccess {
  constructor(readonly kubeconfig: string) {}

  /**
   * The hub as the configuration of a @cluster-proxy/kube `KubeApi` at `hub`'s server: the
   * kubeconfig and its files are read again for every request.
   */
  kubeApiConfig(hub: HubEndpoint): KubeApiConfig {
    return {
      getCurrentCluster: () => ({ server: hub.server.href }),
      applyToHTTPSOptions: async (options) => {
        const { ca, cert, key } = await this.load();
        Object.assign(options, { ca, cert, key, agent: false });
      },
    };
  }

  /** Load the kubeconfig and its files now; throws a ConfigError naming --hub-kubeconfig. */
  async load(): Promise<HubEndpoint> {
    const k8s = await import("@kubernetes/client-node");
    const kc = new k8s.KubeConfig();
    try {
      kc.loadFromFile(this.kubeconfig);
      const cluster = kc.getCurrentCluster();
      if (!cluster) throw new Error("no current cluster");
      const options: https.RequestOptions = {};
      await kc.applyToHTTPSOptions(options);
      const server = new URL(cluster.server);
      if (server.protocol !== "https:") throw new Error(`the server ${cluster.server} is not https://`);
      return {
        server,
        ...(options.ca ? { ca: toBuffer(options.ca) } : {}),
        ...(options.cert ? { cert: toBuffer(options.cert) } : {}),
        ...(options.key ? { key: toBuffer(options.key) } : {}),
      };
    } catch (err) {
      throw new ConfigError(`--hub-kubeconfig: cannot load "${this.kubeconfig}": ${errorMessage(err)}`, {
        cause: err,
      });
    }
  }
}

function toBuffer(v: string | Buffer | (string | Buffer)[] | object): Buffer {
  if (Buffer.isBuffer(v)) return v;
  if (typeof v === "string") return Buffer.from(v);
  if (Array.isArray(v)) return Buffer.concat(v.map((x: string | Buffer) => (Buffer.isBuffer(x) ? x : Buffer.from(x))));
  throw new Error("unsupported TLS material in the kubeconfig");
}

function requestOptions(hub: HubEndpoint, path: string, timeoutMs: number): https.RequestOptions {
  return {
    protocol: "https:",
    host: hub.server.hostname.replace(/^\[|\]$/g, ""),
    port: hub.server.port || 443,
    path,
    ca: hub.ca,
    cert: hub.cert,
    key: hub.key,
    agent: false,
    timeout: timeoutMs,
  };
}

/** What the hub apiserver's answer to the upgrade means for an operator. */
export function explainRefusal(status: number, body: string, where: { namespace: string; pod: string }): string {
  const message = apiStatusMessage(body.trim());
  const head = `hub kube-apiserver answered ${status} to the tunnel upgrade through pods/${where.pod}/proxy`;
  switch (status) {
    case 401:
      return `${head}: the agent's hub credentials (--hub-kubeconfig) were not accepted: ${message}`;
    case 403:
      return `${head}: refused by RBAC (the agent needs get on pods/proxy in namespace ${where.namespace}; the addon manager grants it to the addon's registration): ${message}`;
    case 404:
      return `${head}: the proxy-server pod is gone: ${message}`;
    case 429:
      return `${head}: the apiserver is limiting requests (max in-flight / priority and fairness): ${message}`;
    default:
      return status >= 500
        ? `${head}: the apiserver cannot reach the pod's agent upgrade door: ${message}`
        : `${head}: ${message}`;
  }
}

/** Where one tunnel goes. */
export interface HubTunnelTarget {
  namespace: string;
  pod: string;
  /** The proxy-server's agent upgrade door port. */
  port: number;
}

/**
 * Open a byte stream to `target`'s agent upgrade door through the hub apiserver. Resolves with the
 * upgraded socket (paused; the agent's TLS runs over it); rejects with a ConnectError that says
 * why (an apiserver refusal explained by {@link explainRefusal}).
 */
export function openHubTunnel(
  hub: HubEndpoint,
  target: HubTunnelTarget,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<net.Socket> {
  const path =
    `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/` +
    `${encodeURIComponent(target.pod)}:${target.port}/proxy/`;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (err: Error | undefined, socket?: net.Socket): void => {
      if (settled) {
        socket?.destroy();
        return;
      }
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      if (err) {
        req.destroy();
        reject(err);
      } else resolve(socket!);
    };
    const req = https.request({
      ...requestOptions(hub, path, timeoutMs),
      method: "GET",
      headers: { Connection: "Upgrade", Upgrade: AGENT_UPGRADE_PROTOCOL },
    });
    const timer = setTimeout(
      () =>
        finish(
          new ConnectError(
            `no answer from the hub kube-apiserver ${hub.server.host} to the tunnel upgrade through pods/${target.pod}/proxy within ${timeoutMs} ms`,
          ),
        ),
      timeoutMs,
    );
    const onAbort = (): void => finish(new ConnectError("connect aborted"));
    signal?.addEventListener("abort", onAbort, { once: true });
    req.on("upgrade", (res, socket, head) => {
      socket.pause();
      if (head.length > 0) socket.unshift(head);
      const protocol = String(res.headers.upgrade ?? "").toLowerCase();
      if (protocol !== AGENT_UPGRADE_PROTOCOL) {
        socket.destroy();
        finish(new ConnectError(`pods/${target.pod}/proxy upgraded to "${protocol}", not ${AGENT_UPGRADE_PROTOCOL}`));
        return;
      }
      finish(undefined, socket);
    });
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        if (body.length < 4096) body += chunk;
      });
      const done = (): void =>
        finish(new ConnectError(explainRefusal(res.statusCode ?? 0, body, target), { cause: res.statusCode }));
      res.once("end", done);
      res.once("error", done);
    });
    req.on("error", (err) =>
      finish(
        new ConnectError(`cannot reach the hub kube-apiserver ${hub.server.host}: ${err.message}`, { cause: err }),
      ),
    );
    req.end();
  });
}

/** One EndpointSlice as far as we read it. */
interface EndpointSlice extends KubeObject {
  endpoints?:
    | {
        conditions?: { ready?: boolean | null; terminating?: boolean | null };
        targetRef?: { kind?: string; name?: string };
      }[]
    | null;
}

/**
 * The pods an EndpointSlice names that agents connect to: the ready ones, and the starting ones
 * (not ready, `terminating: false`): a proxy-server that a rollout starts is ready only once
 * agents have connected to it (or after its --ready-after-agents-timeout), so agents must not wait
 * for it to be ready. A terminating one (draining) is left; so is a not-ready one of an apiserver
 * that does not say whether it terminates.
 */
export function readyPods(slice: EndpointSlice): string[] {
  return (slice.endpoints ?? [])
    .filter(
      (e) =>
        (e.conditions?.ready !== false || e.conditions.terminating === false) &&
        e.targetRef?.kind === "Pod" &&
        e.targetRef.name,
    )
    .map((e) => e.targetRef!.name!);
}

export interface ReplicaWatchOptions {
  access: HubAccess;
  namespace: string;
  service: string;
  timeoutMs: number;
  logger: Logger;
  /** Called with the sorted ready pod names whenever they change. */
  onChange: (pods: string[]) => void;
  /** Called with why the list or watch failed (cleared by the next success with undefined). */
  onError: (message: string | undefined) => void;
  /** Delay before listing again after a failure (ms). */
  retryMs: number;
}

/**
 * The ready pods behind a Service, from its EndpointSlices (label `kubernetes.io/service-name`):
 * a supervised watch of @cluster-proxy/kube (loaded here: only agents with --hub-kubeconfig run
 * one) lists them, then watches from the list's resourceVersion; every end of the watch lists
 * again (a watch that failed after `retryMs`).
 */
export class ReplicaWatch {
  private last = "";
  private readonly stopping = new AbortController();

  constructor(private readonly o: ReplicaWatchOptions) {}

  start(): void {
    void this.run(this.stopping.signal);
  }

  stop(): void {
    this.stopping.abort();
  }

  private async run(signal: AbortSignal): Promise<void> {
    const kube = await import("@cluster-proxy/kube");
    let hub: HubEndpoint | undefined;
    while (!hub && !signal.aborted) {
      hub = await this.o.access.load().catch((err: unknown) => {
        this.o.logger.warn({ err: errorMessage(err) }, "proxy-server replica watch: cannot load --hub-kubeconfig");
        this.failed(err);
        return undefined;
      });
      if (!hub) await delay(this.o.retryMs, signal);
    }
    if (!hub) return;
    const api = new kube.KubeApi(this.o.access.kubeApiConfig(hub), { requestTimeoutMs: this.o.timeoutMs });
    const watch: SupervisedWatch<EndpointSlice> = new kube.SupervisedWatch(
      api,
      kube.typedResource<EndpointSlice>(kube.KubeResources.endpointSlice),
      {
        namespace: this.o.namespace,
        labelSelector: `kubernetes.io/service-name=${this.o.service}`,
        relistWhenWatchEnds: true,
        retry: { initialMs: this.o.retryMs, capMs: this.o.retryMs },
        onList: () => {
          this.o.onError(undefined);
          this.publish(watch.items());
        },
        onFailure: (err) => this.failed(err),
      },
      () => this.publish(watch.items()),
      this.o.logger,
    );
    await watch.run(signal);
  }

  private failed(err: unknown): void {
    this.o.onError(
      `cannot learn the proxy-server replicas from the EndpointSlices of ${this.o.namespace}/${this.o.service} on the hub: ${errorMessage(err)}`,
    );
  }

  private publish(slices: EndpointSlice[]): void {
    const pods = [...new Set(slices.flatMap(readyPods))].sort();
    const key = pods.join(",");
    if (key === this.last) return;
    this.last = key;
    this.o.onChange(pods);
  }
}
