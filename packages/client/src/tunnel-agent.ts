/**
 * `http.Agent` / `https.Agent` that open their connections through the hub, so any Node HTTP
 * client (fetch-less `http.request`, `@kubernetes/client-node`, axios with an agent, ...) can
 * reach `http(s)://<cluster>` or `http://<host>.<cluster>:<port>` by name.
 */
import { ConfigError } from "@cluster-proxy/errors";
import * as http from "@cluster-proxy/kit/http";
import * as https from "node:https";
import type { Duplex } from "node:stream";
import { joinHostPort } from "@cluster-proxy/protocol";
import { dialConnect, type ConnectProxyOptions } from "./connect-dial.js";
import { TunnelClient } from "./tunnel-client.js";
import type { TunnelClientOptions } from "./options.js";

/** How the agents reach the hub: give exactly one of `client`, `tunnel` or `connect`. */
export interface TunnelDialerOptions {
  /** Dial through this (shared) client. The agent does not close it. */
  client?: TunnelClient;
  /** Options of a TunnelClient the agent creates for itself (closed by `agent.destroy()`). */
  tunnel?: TunnelClientOptions;
  /** Use the hub's HTTP CONNECT door at this address instead of gRPC. */
  connect?: ConnectProxyOptions;
  /** Limit per dial in ms (default: the client's, 30 s). */
  dialTimeoutMs?: number;
}

/** Options of {@link createTunnelAgent}: how to reach the hub, plus ordinary `http.Agent` options. */
export type TunnelAgentOptions = TunnelDialerOptions & http.AgentOptions;

/**
 * Options of {@link createTunnelHttpsAgent}: how to reach the hub, plus `https.Agent` options.
 * The TLS options (`ca`, `cert`, `key`, `servername`, `rejectUnauthorized`, ...) are those of the
 * connection to the target (e.g. the cluster's kube-apiserver), run INSIDE the tunnel; they are
 * unrelated to the TLS between you and the hub.
 */
export type TunnelHttpsAgentOptions = TunnelDialerOptions & https.AgentOptions;

type Callback = (err: Error | null, stream: Duplex) => void;

/** Dials for an agent; owns its TunnelClient when it created it. */
class AgentDialer {
  private readonly client: TunnelClient | undefined;
  private readonly ownsClient: boolean;
  private readonly connect: ConnectProxyOptions | undefined;
  private readonly timeoutMs: number | undefined;

  constructor(options: TunnelDialerOptions) {
    const given = [options.client, options.tunnel, options.connect].filter((v) => v !== undefined).length;
    if (given !== 1) throw new ConfigError("tunnel agent: give exactly one of client, tunnel or connect");
    this.connect = options.connect;
    this.ownsClient = options.tunnel !== undefined;
    this.client = options.client ?? (options.tunnel ? new TunnelClient(options.tunnel) : undefined);
    this.timeoutMs = options.dialTimeoutMs;
  }

  /** The dial address of a request: its host and port, so `http://east:80/` dials `east:80`. */
  static addressOf(options: http.ClientRequestArgs, defaultPort: number): string {
    const host = options.host ?? options.hostname ?? "localhost";
    const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
    const port = Number(options.port ?? defaultPort) || defaultPort;
    return joinHostPort(bare, port);
  }

  dial(address: string, signal: AbortSignal | undefined): Promise<Duplex> {
    const dialOptions = {
      ...(signal ? { signal } : {}),
      ...(this.timeoutMs !== undefined ? { timeoutMs: this.timeoutMs } : {}),
    };
    if (this.connect) return dialConnect(address, { proxy: this.connect, ...dialOptions });
    return this.client!.dial(address, dialOptions);
  }

  /**
   * Dial the request's address and hand `callback` the stream, passed through `wrap` (e.g. TLS
   * inside the tunnel); a dial error, or an error thrown by `wrap`, goes to `callback` instead.
   */
  open(
    request: http.ClientRequestArgs,
    defaultPort: number,
    callback: Callback | undefined,
    wrap: (socket: Duplex) => Duplex | null | undefined = (socket) => socket,
  ): void {
    this.dial(AgentDialer.addressOf(request, defaultPort), request.signal).then(
      (socket) => {
        let wrapped: Duplex | null | undefined;
        try {
          wrapped = wrap(socket);
        } catch (err) {
          socket.destroy();
          callback?.(err as Error, undefined as unknown as Duplex);
          return;
        }
        if (wrapped) callback?.(null, wrapped);
      },
      (err: unknown) => callback?.(err as Error, undefined as unknown as Duplex),
    );
  }

  close(): void {
    if (this.ownsClient) void this.client?.close();
  }

  /** The options meant for Node's own agent: all but the dialer's. */
  static nodeAgentOptions<T extends TunnelDialerOptions>(options: T): Omit<T, keyof TunnelDialerOptions> {
    const { client: _c, tunnel: _t, connect: _x, dialTimeoutMs: _d, ...agentOptions } = options;
    return agentOptions;
  }
}

/**
 * An `http.Agent` whose connections are tunnelled through the hub. The request's host and port
 * are the dial address. Keep-alive works as with any agent (`keepAlive: true`).
 */
export class TunnelHttpAgent extends http.Agent {
  private readonly dialer: AgentDialer;

  constructor(options: TunnelAgentOptions) {
    super(AgentDialer.nodeAgentOptions(options));
    this.dialer = new AgentDialer(options);
  }

  override createConnection(options: http.ClientRequestArgs, callback?: Callback): Duplex | null | undefined {
    this.dialer.open(options, 80, callback);
    return undefined;
  }

  /** Destroy pooled sockets and close the TunnelClient the agent created (if any). */
  override destroy(): void {
    super.destroy();
    this.dialer.close();
  }
}

/**
 * An `https.Agent` whose connections are tunnelled through the hub; TLS to the target runs
 * inside the tunnel with this agent's (or the request's) TLS options. The request's host is
 * the dial host (default port 443), so `https://east/` reaches cluster `east`'s apiserver.
 */
export class TunnelHttpsAgent extends https.Agent {
  private readonly dialer: AgentDialer;

  constructor(options: TunnelHttpsAgentOptions) {
    super(AgentDialer.nodeAgentOptions(options));
    this.dialer = new AgentDialer(options);
  }

  override createConnection(options: https.RequestOptions, callback?: Callback): Duplex | null | undefined {
    // https.Agent's own createConnection runs tls.connect (with TLS session reuse); with
    // `socket` set it speaks TLS over our tunnel instead of opening a TCP connection.
    this.dialer.open(options, 443, callback, (socket) =>
      super.createConnection({ ...options, socket } as https.RequestOptions),
    );
    return undefined;
  }

  /** Destroy pooled sockets and close the TunnelClient the agent created (if any). */
  override destroy(): void {
    super.destroy();
    this.dialer.close();
  }
}

/** Create a {@link TunnelHttpAgent}: `http.get("http://east:80/", { agent })` dials `east:80`. */
export function createTunnelAgent(options: TunnelAgentOptions): TunnelHttpAgent {
  return new TunnelHttpAgent(options);
}

/**
 * Create a {@link TunnelHttpsAgent}: `https://east/` dials `east:443` and runs TLS to the
 * cluster's apiserver inside the tunnel (pass its `ca`, client `cert`/`key`, `servername`).
 */
export function createTunnelHttpsAgent(options: TunnelHttpsAgentOptions): TunnelHttpsAgent {
  return new TunnelHttpsAgent(options);
}
