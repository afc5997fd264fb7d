/**
 * The workstation's way to the proxy-servers through the hub kube-apiserver's `pods/portforward`: ready
 * pods, one WebSocket port-forward per connection, and the loopback relay the mTLS session runs through.
 * Guide: docs/guides/hub-operations.md#from-a-workstation-only-the-hub-kubeconfig
 */
import { once } from "node:events";
import type * as https from "node:https";
import net from "node:net";
import { Duplex } from "node:stream";
import type { KubeConfig } from "@kubernetes/client-node";
import type { WebSocket as WebSocketLike } from "ws";
import type { KubeApi, KubeObject } from "@cluster-proxy/kube";
import { CommandFailure } from "../cli-context.js";
import { errorMessage } from "@cluster-proxy/errors";

/** The WebSocket subprotocol of port-forward this client speaks (binary channels, v4 framing). */
export const PORT_FORWARD_PROTOCOL = "v4.channel.k8s.io";
/** The label that marks the proxy-server pods (as the addon manager renders them). */
export const PROXY_SERVER_SELECTOR = "proxy.open-cluster-management.io/component-name=proxy-server";

/** A pod as far as the choice of a ready proxy-server reads it. */
export interface PodObject extends KubeObject {
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
}

/** Whether `pod` runs, is Ready and is not being deleted. */
export function isReadyPod(pod: PodObject): boolean {
  return (
    !pod.metadata.deletionTimestamp &&
    pod.status?.phase === "Running" &&
    pod.status.conditions?.some((c) => c.type === "Ready" && c.status === "True") === true
  );
}

/** The label selector of the chart's gateway pods. */
export const GATEWAY_SELECTOR = "app.kubernetes.io/name=cluster-proxy,app.kubernetes.io/component=gateway";

/** The names of the Ready pods of `selector` (default: the proxy-servers) in `namespace`, sorted. */
export async function readyProxyServerPods(
  api: KubeApi,
  namespace: string,
  selector = PROXY_SERVER_SELECTOR,
): Promise<string[]> {
  const { KubeResources } = await import("@cluster-proxy/kube");
  let pods: PodObject[];
  try {
    pods = (await api.list<PodObject>(KubeResources.pod, { namespace, labelSelector: selector })).items;
  } catch (err) {
    throw new CommandFailure(
      `hub: listing the proxy-server pods in namespace ${namespace} (to port-forward through the hub kube-apiserver; needs list on pods there, or --via=direct): ${errorMessage(err)}`,
      { cause: err },
    );
  }
  return pods
    .filter(isReadyPod)
    .map((p) => p.metadata.name)
    .sort();
}

/** Where one port-forward goes. */
export interface PodPortTarget {
  namespace: string;
  pod: string;
  port: number;
}

/** The apiserver path of `target`'s port-forward. */
export function portForwardPath(target: PodPortTarget): string {
  return `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}/portforward?ports=${target.port}`;
}

/** What the hub apiserver's refusal of a port-forward means for an operator. */
export function explainPortForwardRefusal(status: number, body: string, target: PodPortTarget): string {
  let message = body.trim().slice(0, 300);
  try {
    const parsed = JSON.parse(body) as { message?: unknown };
    if (typeof parsed.message === "string") message = parsed.message;
  } catch {
    // not a Status: the text as it came
  }
  const head = `hub kube-apiserver answered ${status} to the port-forward to pods/${target.pod} port ${target.port}`;
  switch (status) {
    case 401:
      return `${head}: the hub credentials were not accepted: ${message}`;
    case 403:
      return `${head}: refused by RBAC (needs create on pods/portforward in namespace ${target.namespace}; or --via=direct): ${message}`;
    case 404:
      return `${head}: the pod is gone: ${message}`;
    default:
      return `${head}: ${message}`;
  }
}

/** The WebSocket URL of `path` on the kubeconfig's current cluster (its path prefix kept). */
function webSocketUrl(server: string, path: string): string {
  const url = new URL(server);
  const scheme = url.protocol === "http:" ? "ws:" : "wss:";
  return `${scheme}//${url.host}${url.pathname.replace(/\/$/, "")}${path}`;
}

/**
 * Open one connection to `target` through the hub apiserver of `kc` (its current cluster and
 * user: TLS, tokens and exec plugins as client-go applies them). Resolves once the apiserver
 * upgraded and the pod's port answered; rejects with a {@link CommandFailure} that says why.
 */
export async function openPodPortForward(
  kc: KubeConfig,
  target: PodPortTarget,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<Duplex> {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new CommandFailure("hub: the kubeconfig has no current cluster");
  const opts: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(opts);
  const { WebSocket } = await import("ws");
  const ws = new WebSocket(webSocketUrl(server, portForwardPath(target)), [PORT_FORWARD_PROTOCOL], {
    ...opts,
    handshakeTimeout: timeoutMs,
    perMessageDeflate: false,
  });
  const stream = new PortForwardStream(ws, target);
  return new Promise<Duplex>((resolve, reject) => {
    let settled = false;
    const fail = (err: Error): void => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      ws.terminate();
      stream.destroy();
      reject(err);
    };
    const onAbort = (): void => fail(new CommandFailure(`port-forward to pods/${target.pod}: aborted`));
    signal?.addEventListener("abort", onAbort, { once: true });
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        if (body.length < 4096) body += c;
      });
      const done = (): void => fail(new CommandFailure(explainPortForwardRefusal(res.statusCode ?? 0, body, target)));
      res.once("end", done);
      res.once("error", done);
    });
    ws.once("error", (err: Error) =>
      fail(new CommandFailure(`port-forward to pods/${target.pod} through the hub kube-apiserver: ${err.message}`)),
    );
    ws.once("open", () => {
      if (ws.protocol !== PORT_FORWARD_PROTOCOL) {
        fail(
          new CommandFailure(
            `port-forward to pods/${target.pod}: the hub kube-apiserver chose the subprotocol "${ws.protocol}", not ${PORT_FORWARD_PROTOCOL}`,
          ),
        );
        return;
      }
      // The kubelet names the port on both channels when the stream is set up; a port nothing
      // listens on is then reported on the error channel.
      stream.ready.then(
        () => {
          if (settled) return;
          settled = true;
          signal?.removeEventListener("abort", onAbort);
          resolve(stream);
        },
        (err: Error) => fail(err),
      );
    });
  });
}

/** Channel of the forwarded port's data, and of its errors. */
const DATA = 0;
const ERROR = 1;

/** One forwarded connection over a port-forward WebSocket, as a Duplex. */
class PortForwardStream extends Duplex {
  /** Resolves when both channels have named their port (the forward is set up). */
  readonly ready: Promise<void>;
  private named = [false, false];
  private errorText = "";
  private onReady!: () => void;
  private onFailed!: (err: Error) => void;

  constructor(
    private readonly ws: WebSocketLike,
    private readonly target: PodPortTarget,
  ) {
    super({ allowHalfOpen: false });
    this.ready = new Promise<void>((resolve, reject) => {
      this.onReady = resolve;
      this.onFailed = reject;
    });
    // A caller that never awaits `ready` (destroyed first) must not see an unhandled rejection,
    // and an error that arrives with the port numbers (in the same read) is emitted before the
    // caller could listen: it stays in `errored` and ends the stream.
    this.ready.catch(() => undefined);
    this.on("error", () => undefined);
    ws.on("message", (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
      const frame = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      if (!isBinary || frame.length === 0) return;
      this.message(frame[0]!, frame.subarray(1));
    });
    ws.on("close", () => {
      const err = this.errorText ? this.failure() : undefined;
      this.onFailed(err ?? new Error(`port-forward to pods/${target.pod} closed before the port answered`));
      if (err) this.destroy(err);
      else this.push(null);
    });
    ws.on("error", (err: Error) => this.destroy(err));
  }

  private failure(): Error {
    return new CommandFailure(
      `port-forward to pods/${this.target.pod} port ${this.target.port}: ${this.errorText.trim()}`,
    );
  }

  private message(channel: number, payload: Buffer): void {
    if (channel !== DATA && channel !== ERROR) return;
    if (!this.named[channel]) {
      // The first message of each channel is its port (2 bytes), possibly followed by data.
      this.named[channel] = true;
      payload = payload.subarray(2);
      if (this.named[DATA] && this.named[ERROR]) this.onReady();
    }
    if (payload.length === 0) return;
    if (channel === ERROR) {
      this.errorText += payload.toString("utf8");
      const err = this.failure();
      this.onFailed(err);
      this.destroy(err);
      return;
    }
    if (!this.push(payload)) this.ws.pause();
  }

  override _read(): void {
    this.ws.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.ws.send(Buffer.concat([Buffer.of(DATA), chunk]), { binary: true }, (err) => callback(err ?? null));
  }

  override _final(callback: (error?: Error | null) => void): void {
    // The v4 protocol has no half-close: the connection ends when the WebSocket does.
    this.ws.close(1000);
    callback();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(1000);
    else if (this.ws.readyState === this.ws.CONNECTING) this.ws.terminate();
    callback(err);
  }
}

/** Options of {@link ApiserverRelay.start}. */
export interface ApiserverRelayOptions {
  kc: KubeConfig;
  api: KubeApi;
  /** The proxy-server namespace. */
  namespace: string;
  /** The door port in the pods (e.g. 8090, the proxy-servers' gRPC client door). */
  port: number;
  /** The pods to forward to (default: the proxy-servers, {@link PROXY_SERVER_SELECTOR}). */
  selector?: string;
  /** Where to listen (default 127.0.0.1, a free port). */
  listen?: { host?: string; port?: number };
  /** Limit for one port-forward to open (ms). */
  timeoutMs: number;
  /** Told about every connection that could not be forwarded. */
  onError?: (message: string) => void;
}

/**
 * A loopback listener whose every connection is forwarded, through the hub kube-apiserver, to the
 * door port of a ready proxy-server pod (see the module comment).
 */
export class ApiserverRelay {
  /** The pod the last connection went to. */
  pod: string | undefined;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    private readonly o: ApiserverRelayOptions,
    private readonly server: net.Server,
  ) {}

  /** Choose a ready pod now (so that a missing right or pod fails at once), then listen. */
  static async start(o: ApiserverRelayOptions): Promise<ApiserverRelay> {
    const server = net.createServer({ pauseOnConnect: true });
    const relay = new ApiserverRelay(o, server);
    await relay.choosePod();
    server.on("connection", (socket) => relay.accept(socket));
    server.listen(o.listen?.port ?? 0, o.listen?.host ?? "127.0.0.1");
    try {
      await Promise.race([
        once(server, "listening"),
        once(server, "error").then(([err]: Error[]) => Promise.reject(err ?? new Error("listen failed"))),
      ]);
    } catch (err) {
      throw new CommandFailure(
        `listen on ${o.listen?.host ?? "127.0.0.1"}:${o.listen?.port ?? 0}: ${errorMessage(err)}`,
        { cause: err },
      );
    }
    return relay;
  }

  /** The listening port. */
  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** A Ready proxy-server pod: the last one while it stays Ready, else the first Ready one. */
  async choosePod(): Promise<string> {
    const selector = this.o.selector ?? PROXY_SERVER_SELECTOR;
    const ready = await readyProxyServerPods(this.o.api, this.o.namespace, selector);
    if (ready.length === 0)
      throw new CommandFailure(
        `hub: no Ready ${selector === PROXY_SERVER_SELECTOR ? "proxy-server " : ""}pod in namespace ${this.o.namespace} to port-forward to (pods with ${selector})`,
      );
    this.pod = this.pod && ready.includes(this.pod) ? this.pod : ready[0]!;
    return this.pod;
  }

  /** Open one connection to the chosen pod's door through the apiserver. */
  async open(signal?: AbortSignal): Promise<Duplex> {
    const pod = await this.choosePod();
    return openPodPortForward(
      this.o.kc,
      { namespace: this.o.namespace, pod, port: this.o.port },
      this.o.timeoutMs,
      signal,
    );
  }

  private accept(local: net.Socket): void {
    this.sockets.add(local);
    local.once("close", () => this.sockets.delete(local));
    local.on("error", () => undefined);
    const abort = new AbortController();
    local.once("close", () => abort.abort());
    this.open(abort.signal).then(
      (remote) => {
        if (local.destroyed) {
          remote.destroy();
          return;
        }
        remote.on("error", () => local.destroy());
        remote.once("close", () => local.destroy());
        local.once("close", () => remote.destroy());
        local.pipe(remote).pipe(local);
        local.resume();
      },
      (err: Error) => {
        // A client that left before its forward was open is no failure to report.
        if (!abort.signal.aborted) this.o.onError?.(err.message);
        local.destroy();
      },
    );
  }

  /** Stop listening and cut every forwarded connection. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
  }
}
