/**
 * The PortForward entrypoint, agent side: {@link HubAccess} (the hub kubeconfig, re-read at each use),
 * {@link openHubTunnel} (the upgrade through the hub apiserver) and {@link ReplicaWatch} (ready replicas).
 * Design: docs/design/portforward.md#the-path
 */
import * as https from "node:https";
import type * as net from "node:net";
import { AGENT_UPGRADE_PROTOCOL, ConfigError } from "@cluster-proxy/api";
import { ConnectError } from "@cluster-proxy/tunnel";
import { type Logger } from "@cluster-proxy/kit";
import { apiStatusMessage } from "./kube-status.js";
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
interface EndpointSlice {
  metadata: { name: string; resourceVersion?: string };
  endpoints?:
    | {
        conditions?: { ready?: boolean | null; terminating?: boolean | null };
        targetRef?: { kind?: string; name?: string };
      }[]
    | null;
}

interface SliceList {
  metadata: { resourceVersion?: string };
  items: EndpointSlice[];
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
 * list, then watch from the list's resourceVersion; every end of the watch lists again (a watch
 * that failed after `retryMs`).
 */
export class ReplicaWatch {
  private readonly slices = new Map<string, string[]>();
  private last = "";
  private stopped = false;
  private request: ReturnType<typeof https.request> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: ReplicaWatchOptions) {}

  start(): void {
    this.cycle(0);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.request?.destroy();
  }

  private cycle(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.listAndWatch().then(
        () => this.cycle(0),
        (err: unknown) => {
          const message = `cannot learn the proxy-server replicas from the EndpointSlices of ${this.o.namespace}/${this.o.service} on the hub: ${err instanceof Error ? err.message : String(err)}`;
          this.o.logger.warn({ err: message }, "proxy-server replica watch failed");
          this.o.onError(message);
          this.cycle(this.o.retryMs);
        },
      );
    }, delayMs);
  }

  private base(): string {
    const selector = encodeURIComponent(`kubernetes.io/service-name=${this.o.service}`);
    return `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(this.o.namespace)}/endpointslices?labelSelector=${selector}`;
  }

  private publish(): void {
    const pods = [...new Set([...this.slices.values()].flat())].sort();
    const key = pods.join(",");
    if (key === this.last) return;
    this.last = key;
    this.o.onChange(pods);
  }

  private async listAndWatch(): Promise<void> {
    const hub = await this.o.access.load();
    const list = await this.getJson<SliceList>(hub, this.base());
    this.slices.clear();
    for (const s of list.items) this.slices.set(s.metadata.name, readyPods(s));
    this.o.onError(undefined);
    this.publish();
    await this.watch(hub, list.metadata.resourceVersion ?? "");
  }

  private getJson<T>(hub: HubEndpoint, path: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const req = https.get(requestOptions(hub, path, this.o.timeoutMs), (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.once("end", () => {
          if (res.statusCode !== 200) {
            reject(new Error(`list answered ${res.statusCode}: ${body.slice(0, 300)}`));
            return;
          }
          try {
            resolve(JSON.parse(body) as T);
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        });
        res.once("error", reject);
      });
      req.once("timeout", () => req.destroy(new Error(`no answer within ${this.o.timeoutMs} ms`)));
      req.once("error", reject);
      this.request = req;
    });
  }

  /** Watch until the server ends it (resolve) or it fails (reject). */
  private watch(hub: HubEndpoint, resourceVersion: string): Promise<void> {
    const path = `${this.base()}&watch=1&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=${encodeURIComponent(resourceVersion)}`;
    return new Promise((resolve, reject) => {
      const req = https.get({ ...requestOptions(hub, path, this.o.timeoutMs), timeout: 0 }, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          reject(new Error(`watch answered ${res.statusCode}`));
          return;
        }
        let buffered = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          buffered += chunk;
          for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
            const line = buffered.slice(0, nl).trim();
            buffered = buffered.slice(nl + 1);
            if (line) this.event(line);
          }
        });
        res.once("end", () => resolve());
        res.once("error", reject);
      });
      req.once("error", reject);
      this.request = req;
    });
  }

  private event(line: string): void {
    let event: { type?: string; object?: EndpointSlice };
    try {
      event = JSON.parse(line) as { type?: string; object?: EndpointSlice };
    } catch {
      return;
    }
    const slice = event.object;
    if (!slice?.metadata?.name) return;
    if (event.type === "ADDED" || event.type === "MODIFIED") this.slices.set(slice.metadata.name, readyPods(slice));
    else if (event.type === "DELETED") this.slices.delete(slice.metadata.name);
    else if (event.type === "ERROR") {
      // 410 Gone and the like: the response ends and we list again.
      this.request?.destroy();
      return;
    } else return;
    this.publish();
  }
}
