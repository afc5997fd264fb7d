/**
 * The connections to the clusters' gateway endpoints: per cluster one keep-alive `https.Agent`
 * (at most --max-connections-per-cluster sockets; further requests queue in the agent) whose
 * sockets are tunnel dials of `gateway.cluster-proxy.invalid.<cluster>:443` wrapped in mutual
 * TLS: the gateway identity as client certificate, the endpoint's certificate verified against
 * --agent-ca and required to grant the cluster (URI SAN `cluster-proxy://cluster/<cluster>`).
 * The dialer is injected: the TunnelClient in production, a loopback connection in tests.
 */
import * as https from "node:https";
import type { Duplex } from "node:stream";
import type { PeerCertificate } from "node:tls";
import { clusterNamesFromCertificate } from "@cluster-proxy/pki";

/** The reserved host the agents serve their gateway endpoint on (docs/design/gateway.md). */
export const GATEWAY_ENDPOINT_HOST = "gateway.cluster-proxy.invalid";
/** Its port. */
export const GATEWAY_ENDPOINT_PORT = 443;

/** The tunnel address of `cluster`'s gateway endpoint. */
export function endpointAddress(cluster: string): string {
  return `${GATEWAY_ENDPOINT_HOST}.${cluster}:${GATEWAY_ENDPOINT_PORT}`;
}

/** Opens a stream to `address` (`host:port`); rejects with the dial's error. */
export type Dialer = (address: string, signal?: AbortSignal) => Promise<Duplex>;

/** TLS material of the gateway identity and the agents' CA. */
export interface EndpointTls {
  cert: Buffer;
  key: Buffer;
  ca: Buffer;
}

/** Why an endpoint's certificate is not `cluster`'s, or undefined when it is. */
export function endpointIdentityProblem(cluster: string, cert: PeerCertificate): Error | undefined {
  let names: string[];
  try {
    names = cert.raw ? clusterNamesFromCertificate(cert.raw) : [];
  } catch (err) {
    return new Error(`the endpoint certificate is unreadable: ${(err as Error).message}`);
  }
  return names.includes(cluster)
    ? undefined
    : new Error(`the endpoint certificate does not grant cluster "${cluster}" (grants: ${names.join(", ") || "none"})`);
}

type Callback = (err: Error | null, stream: Duplex) => void;

/** One cluster's agent: see the module comment. */
export class ClusterAgent extends https.Agent {
  /** Tunnel dials made (for tests and metrics). */
  dials = 0;
  /** Set when new TLS material replaced this agent: its connections close once idle. */
  private retired = false;

  constructor(
    readonly cluster: string,
    private readonly dial: Dialer,
    tls: EndpointTls,
    maxSockets: number,
  ) {
    super({
      keepAlive: true,
      maxSockets,
      maxFreeSockets: maxSockets,
      scheduling: "lifo",
      cert: tls.cert,
      key: tls.key,
      ca: tls.ca,
      servername: GATEWAY_ENDPOINT_HOST,
      checkServerIdentity: (_host, cert) => endpointIdentityProblem(cluster, cert),
    });
  }

  /** Stop keeping connections: idle ones close now, busy ones when their request is done. */
  retire(): void {
    this.retired = true;
    for (const sockets of Object.values(this.freeSockets)) for (const s of sockets ?? []) s.destroy();
  }

  override keepSocketAlive(socket: Parameters<https.Agent["keepSocketAlive"]>[0]): boolean {
    if (this.retired) return false;
    // Node's implementation answers whether the socket may be kept (its typings say void).
    const keep: unknown = super.keepSocketAlive(socket);
    return keep !== false;
  }

  override createConnection(options: https.RequestOptions, callback?: Callback): Duplex | null | undefined {
    this.dials++;
    this.dial(endpointAddress(this.cluster), options.signal ?? undefined).then(
      (socket) => {
        let tlsSocket: Duplex;
        try {
          tlsSocket = super.createConnection({ ...options, socket } as https.RequestOptions) as Duplex;
        } catch (err) {
          socket.destroy();
          callback?.(err as Error, socket);
          return;
        }
        callback?.(null, tlsSocket);
      },
      (err: unknown) => callback?.(err instanceof Error ? err : new Error(String(err)), undefined as unknown as Duplex),
    );
    return undefined;
  }
}

/** The agents of all clusters. */
export class ClusterPool {
  private readonly agents = new Map<string, ClusterAgent>();

  constructor(
    private readonly dial: Dialer,
    private tls: EndpointTls,
    private readonly maxConnectionsPerCluster: number,
  ) {}

  /** The TLS material new connections use (the fleet view's endpoint probes use it too). */
  get endpointTls(): EndpointTls {
    return this.tls;
  }

  /**
   * Use new TLS material (a renewed gateway identity, a new agent CA bundle) for new
   * connections; the old connections finish their requests and close.
   */
  renew(tls: EndpointTls): void {
    this.tls = tls;
    for (const agent of this.agents.values()) agent.retire();
    this.agents.clear();
  }

  /** The agent of `cluster` (created on first use). */
  agentFor(cluster: string): ClusterAgent {
    let agent = this.agents.get(cluster);
    if (!agent) {
      agent = new ClusterAgent(cluster, this.dial, this.tls, this.maxConnectionsPerCluster);
      this.agents.set(cluster, agent);
    }
    return agent;
  }

  /** Drop `cluster`'s agent (its cluster was removed). */
  forget(cluster: string): void {
    this.agents.get(cluster)?.destroy();
    this.agents.delete(cluster);
  }

  /** Close every pooled connection. */
  destroy(): void {
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
  }
}
