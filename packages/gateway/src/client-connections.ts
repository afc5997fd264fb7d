/**
 * Bounds on the connections at the gateway's port that Node does not give by itself: how many
 * connections one client may hold (by source address; an IPv6 client by its /64, which one host
 * usually holds whole); HTTP/2 connections closed when no stream has been open on them for an
 * idle time (a watch or any request in flight keeps its connection), and cut when their client
 * resets streams faster than an allowance (rapid reset); HTTP/1.1 connections that never begin a
 * request closed after the same idle time.
 */
import type { IncomingMessage } from "node:http";
import { isIPv4, isIPv6, type Server, type Socket } from "node:net";
import { constants, type Http2SecureServer, type Http2ServerRequest, type ServerHttp2Session } from "node:http2";
import { TLSSocket } from "node:tls";
import { realClock, type Clock, type TimerHandle } from "@cluster-proxy/kit";

const MAPPED_IPV4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** The 8 groups of an IPv6 address (zone dropped, an embedded IPv4 address as two groups). */
function ipv6Groups(address: string): number[] {
  let a = address.split("%")[0]!;
  const dotted = /^(.*:)(\d{1,3}(?:\.\d{1,3}){3})$/.exec(a);
  if (dotted) {
    const [b0, b1, b2, b3] = dotted[2]!.split(".").map(Number) as [number, number, number, number];
    a = `${dotted[1]!}${((b0 << 8) | b1).toString(16)}:${((b2 << 8) | b3).toString(16)}`;
  }
  const [head, tail] = a.split("::") as [string, string | undefined];
  const h = head === "" ? [] : head.split(":");
  const t = tail === undefined || tail === "" ? [] : tail.split(":");
  const fill = tail === undefined ? [] : Array<string>(Math.max(0, 8 - h.length - t.length)).fill("0");
  return [...h, ...fill, ...t].map((g) => parseInt(g, 16));
}

/**
 * The client a connection from `address` counts against: an IPv4 address (an IPv4-mapped IPv6
 * one too) as it is, an IPv6 address by its /64.
 */
export function clientKeyOf(address: string | undefined): string {
  if (address === undefined) return "";
  const mapped = MAPPED_IPV4.exec(address);
  if (mapped) return mapped[1]!;
  if (isIPv4(address) || !isIPv6(address.split("%")[0]!)) return address;
  return `${ipv6Groups(address)
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(":")}::/64`;
}

/** Counts each client's open connections; see the module comment. */
export class ClientConnections {
  private readonly open = new Map<string, number>();
  /** The admitted connections still counted, by remote address and port: how to stop counting each. */
  private readonly counted = new Map<string, () => void>();

  constructor(private readonly maxPerClient: number) {}

  /** Connections open now from the client of `address`. */
  count(address: string | undefined): number {
    return this.open.get(clientKeyOf(address)) ?? 0;
  }

  /**
   * Count `socket` against its client until it closes; when the client already holds its cap,
   * destroy `socket` instead and return false.
   */
  admit(socket: Socket): boolean {
    const key = clientKeyOf(socket.remoteAddress);
    const n = this.open.get(key) ?? 0;
    if (n >= this.maxPerClient) {
      socket.destroy();
      return false;
    }
    this.open.set(key, n + 1);
    const id = connectionId(socket);
    let counted = true;
    const uncount = (): void => {
      if (!counted) return;
      counted = false;
      this.counted.delete(id);
      const left = (this.open.get(key) ?? 1) - 1;
      if (left <= 0) this.open.delete(key);
      else this.open.set(key, left);
    };
    this.counted.set(id, uncount);
    socket.once("close", uncount);
    return true;
  }

  /**
   * Stop counting the admitted connection that `socket` runs over (the same remote address and
   * port: a TLS socket over the accepted one), e.g. once it proved to be the hub's front proxy.
   */
  release(socket: Socket): void {
    this.counted.get(connectionId(socket))?.();
  }
}

function connectionId(socket: Socket): string {
  return `${socket.remoteAddress ?? ""}|${socket.remotePort ?? ""}`;
}

/** What {@link guardSession} holds an HTTP/2 connection to. */
export interface SessionLimits {
  /** Close the connection when no stream has been open on it for this long. */
  idleTimeoutMs: number;
  /**
   * Streams the client may reset before their answer began (a rapid reset, CVE-2023-44487),
   * at once; the allowance refills at a tenth of this per second.
   */
  maxEarlyResets: number;
}

/**
 * Hold `session` to `limits`: close it (GOAWAY, then the connection) once no stream has been open
 * on it for the idle time (from its start, and each time its last open stream closes); cut it
 * (GOAWAY ENHANCE_YOUR_CALM) when its client resets streams before their answers faster than the
 * allowance, calling `onCut`; time is `clock`'s. An early reset can cost the gateway a hub review
 * and a relay. A `multiplexed` session (the hub apiserver's, carrying every user of the aggregated
 * path, each held by the hub apiserver's own limits) is never cut for resets. nghttp2's own guard,
 * which counts resets of any stream, is lifted on the gateway's server (the kit's
 * MULTIPLEXED_SESSION_RESETS). Design: docs/design/gateway.md#streams-a-caller-cancels
 */
export function guardSession(
  session: ServerHttp2Session,
  limits: SessionLimits,
  onCut: (reason: "stream-resets") => void = () => undefined,
  clock: Clock = realClock,
  multiplexed = false,
): void {
  let open = 0;
  let timer: TimerHandle;
  let allowance = limits.maxEarlyResets;
  let refilled = clock.now();
  let cut = false;
  const arm = (): void => {
    clock.clearTimeout(timer);
    timer = clock.setTimeout(() => {
      if (open === 0 && !session.closed && !session.destroyed) session.close();
    }, limits.idleTimeoutMs);
  };
  const earlyReset = (): void => {
    // Streams that end with their connection are not the client's resets; a connection carrying
    // many users' requests is not cut for one user's.
    if (multiplexed || session.destroyed || session.closed) return;
    const t = clock.now();
    allowance = Math.min(limits.maxEarlyResets, allowance + ((t - refilled) / 1000) * (limits.maxEarlyResets / 10));
    refilled = t;
    if (--allowance >= 0 || cut) return;
    cut = true;
    onCut("stream-resets");
    session.goaway(constants.NGHTTP2_ENHANCE_YOUR_CALM);
    // After the GOAWAY is out.
    setImmediate(() => session.destroy());
  };
  session.on("stream", (stream) => {
    open++;
    clock.clearTimeout(timer);
    stream.once("close", () => {
      // Whatever its code: a client may reset with NO_ERROR, which node reports like a normal
      // close, and the gateway never ends a stream without its answer's head.
      if (!stream.headersSent) earlyReset();
      if (--open === 0 && !session.closed && !session.destroyed) arm();
    });
  });
  session.once("close", () => clock.clearTimeout(timer));
  arm();
}

/**
 * HTTP/1.1 connections that say nothing: Node's HTTP/1.1 server times out a request whose
 * headers are slow and a connection idle after a response (keepAliveTimeout, 5 s), but not one
 * that never begins a request. Such a connection is closed when it has begun none within the idle
 * time of its handshake (on `clock`, default the kit's `realClock`).
 */
export class SilentConnections {
  private readonly begun = new WeakSet<object>();

  constructor(
    private readonly idleMs: number,
    private readonly clock: Clock = realClock,
  ) {}

  /** A connection that will speak HTTP/1.1 was accepted. */
  accepted(socket: Socket): void {
    const timer = this.clock.setTimeout(() => {
      if (!this.begun.has(socket)) socket.destroy();
    }, this.idleMs);
    socket.once("close", () => this.clock.clearTimeout(timer));
  }

  /** `socket` began a request (or an upgrade). */
  began(socket: object): void {
    this.begun.add(socket);
  }
}

/** The bounds {@link guardPort} holds a port's connections to. */
export interface PortLimits extends SessionLimits {
  /** Connections one client may hold at once. */
  maxConnectionsPerClient: number;
}

/** Why {@link guardPort} refused or cut a connection (the metric's `reason`). */
export type RefusalOfConnection = "client-connection-cap" | "stream-resets";

/**
 * Hold the connections of `server` (HTTP/2 with HTTP/1.1 allowed) to `limits`: the per-client
 * cap (before the TLS handshake), {@link SilentConnections} for HTTP/1.1 and
 * {@link guardSession} for HTTP/2; `onRefused` hears of each connection refused or cut. A
 * connection for which `uncapped` holds after its handshake (the hub apiserver's, carrying every
 * user of the aggregated path, each bounded per user) stops counting against its address. The
 * idle times and the reset allowance run on `clock` (default the kit's `realClock`).
 */
export function guardPort(
  server: Http2SecureServer,
  limits: PortLimits,
  onRefused: (reason: RefusalOfConnection) => void,
  listener: Server = server,
  uncapped: (socket: TLSSocket) => boolean = () => false,
  clock: Clock = realClock,
): void {
  const clients = new ClientConnections(limits.maxConnectionsPerClient);
  // Counted where connections are accepted (`listener`, e.g. the plain-HTTP guard in front of
  // `server`), so that a client over its cap is closed on arrival, before it sends a byte.
  listener.on("connection", (socket: Socket) => {
    if (!clients.admit(socket)) onRefused("client-connection-cap");
  });
  const silent = new SilentConnections(limits.idleTimeoutMs, clock);
  server.on("secureConnection", (socket: TLSSocket) => {
    if (uncapped(socket)) clients.release(socket);
    if (socket.alpnProtocol !== "h2") silent.accepted(socket);
  });
  server.on("request", (req: IncomingMessage | Http2ServerRequest) => {
    if (!("stream" in req)) silent.began(req.socket);
  });
  for (const event of ["upgrade", "connect"])
    server.on(event, (req: IncomingMessage | Http2ServerRequest) => {
      if (!("stream" in req)) silent.began(req.socket);
    });
  server.on("session", (session: ServerHttp2Session) => {
    const socket = session.socket;
    guardSession(session, limits, onRefused, clock, socket instanceof TLSSocket && uncapped(socket));
  });
}
