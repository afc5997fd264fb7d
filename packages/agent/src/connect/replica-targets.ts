/**
 * The PortForward {@link ServerTargets}: the ready proxy-server replicas from {@link ReplicaWatch},
 * each pod its own target, reached through the hub kube-apiserver.
 * Design: docs/design/portforward.md#the-path
 */
import { openHubTunnel, ReplicaWatch, type ReplicaWatchOptions } from "./hub-tunnel.js";
import type { ServerTarget, ServerTargets } from "./server-targets.js";

export interface ReplicaTargetsOptions extends ReplicaWatchOptions {
  /** The proxy-server's agent upgrade door port. */
  port: number;
}

/** One tunnel to every ready proxy-server pod, through the hub kube-apiserver. */
export class ReplicaServerTargets implements ServerTargets {
  readonly eager = true;
  /** Why the replicas are unknown, until the next successful list. */
  error: string | undefined;
  private readonly watch: ReplicaWatch;
  /** The ready proxy-server pods (sorted). */
  private readyReplicas: string[] = [];
  /** The pod each tunnel was opened to, by serverID. */
  private readonly podOfServer = new Map<string, string>();
  /** The pod of the last attempt: the next attempt tries the next one, so one bad pod blocks none. */
  private lastTriedPod = "";

  constructor(private readonly o: ReplicaTargetsOptions) {
    this.watch = new ReplicaWatch({
      ...o,
      onChange: (pods) => this.setReady(pods),
      onError: (message) => {
        this.error = message;
        o.onError(message);
      },
    });
  }

  /** The ready pods count (the servers' own count is their --server-count). */
  get knownServerCount(): number {
    return Math.max(1, this.readyReplicas.length);
  }

  /** Follow the ready replicas. */
  start(): void {
    this.watch.start();
  }

  stop(): void {
    this.watch.stop();
  }

  /** The ready replicas are now `pods` (sorted), as the watch saw them. */
  setReady(pods: string[]): void {
    this.readyReplicas = pods;
    this.o.onChange(pods);
  }

  wantsAnother(): boolean {
    return this.nextPod() !== undefined;
  }

  pick(): ServerTarget | undefined {
    const pod = this.nextPod();
    if (pod === undefined) return undefined;
    this.lastTriedPod = pod;
    const { access, namespace, port, timeoutMs } = this.o;
    return {
      pod,
      open: async (signal) => openHubTunnel(await access.load(), { namespace, pod, port }, timeoutMs, signal),
    };
  }

  opened(serverID: string, target: ServerTarget): void {
    if (target.pod !== undefined) this.podOfServer.set(serverID, target.pod);
  }

  closed(serverID: string): void {
    this.podOfServer.delete(serverID);
  }

  /**
   * The ready pod to open a tunnel to next: one without a tunnel, the first after the last one
   * tried (in name order, wrapping), so every agent covers every replica.
   */
  private nextPod(): string | undefined {
    const held = new Set(this.podOfServer.values());
    const missing = this.readyReplicas.filter((p) => !held.has(p));
    return missing.find((p) => p > this.lastTriedPod) ?? missing[0];
  }
}
