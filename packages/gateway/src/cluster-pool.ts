/**
 * The connections to the clusters' gateway endpoints: mutual TLS over tunnel dials, HTTP/2 sessions
 * for plain requests (bounded per cluster, FIFO when full), an HTTP/1.1 connection per upgrade.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import { once } from "node:events";
import * as http2 from "node:http2";
import type { Duplex } from "node:stream";
import * as tls from "node:tls";
import type { PeerCertificate } from "node:tls";
import { GATEWAY_ENDPOINT_HOST, gatewayEndpointAddress } from "@cluster-proxy/api";
import { clusterNamesFromCertificate } from "@cluster-proxy/pki";
import { errorMessage } from "@cluster-proxy/errors";
import { realClock, type Timers } from "@cluster-proxy/kit";
import { probeIdleSession } from "@cluster-proxy/tunnel";

/** How long an endpoint may take to send its SETTINGS before its session is given up. */
export const SETTINGS_TIMEOUT_MS = 10_000;
/** Streams a session takes when the endpoint's SETTINGS name no limit. */
export const UNLIMITED_STREAMS_CAP = 1000;

/**
 * How the gateway learns, end to end, that an endpoint session's path is gone when no hop said so
 * (an agent that left while its proxy-server drained, a close lost behind the hub apiserver): the
 * session would stay open and silent, and a watch on it silent for ever.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11 (liveness)
 */
export interface EndpointLiveness {
  /** Quiet ms (no frame either way) before an open session is pinged through the tunnel. */
  idleMs: number;
  /** An answered ping doubles the next quiet period, up to this. */
  maxIdleMs: number;
  /** A ping unanswered this long destroys the session (its streams fail: a watch is listed again). */
  timeoutMs: number;
  /**
   * After the endpoint's GOAWAY (the agent drains) node's session can no longer ping: the streams
   * still running are ended this long after it. Above the agent's default drain grace period
   * (30 s), so an agent that ends them itself is never cut short.
   */
  goawayGraceMs: number;
}

/** The gateway's {@link EndpointLiveness}. */
export const ENDPOINT_LIVENESS: EndpointLiveness = {
  idleMs: 5_000,
  maxIdleMs: 30_000,
  timeoutMs: 10_000,
  goawayGraceMs: 35_000,
};

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
    return new Error(`the endpoint certificate is unreadable: ${errorMessage(err)}`);
  }
  return names.includes(cluster)
    ? undefined
    : new Error(`the endpoint certificate does not grant cluster "${cluster}" (grants: ${names.join(", ") || "none"})`);
}

/**
 * A tunnel dial of `cluster`'s endpoint with a finished mutual TLS handshake that negotiated `alpn`
 * (rejects otherwise: an agent that does not serve it is older than this gateway).
 */
export async function connectEndpoint(
  dial: Dialer,
  cluster: string,
  material: EndpointTls,
  alpn: "h2" | "http/1.1",
  signal?: AbortSignal,
): Promise<tls.TLSSocket> {
  const socket = await dial(gatewayEndpointAddress(cluster), signal);
  const s = tls.connect({
    socket,
    cert: material.cert,
    key: material.key,
    ca: material.ca,
    servername: GATEWAY_ENDPOINT_HOST,
    ALPNProtocols: [alpn],
    checkServerIdentity: (_host, peer) => endpointIdentityProblem(cluster, peer),
  });
  const onAbort = (): void => void s.destroy(new Error("the caller went away"));
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    await once(s, "secureConnect");
  } catch (err) {
    socket.destroy();
    throw err;
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
  if (s.alpnProtocol !== alpn) {
    s.destroy();
    throw new Error(
      `the endpoint did not negotiate ${alpn} (got ${s.alpnProtocol || "none"}): is the agent older than the gateway?`,
    );
  }
  return s;
}

/** The last stream id each session's GOAWAY said the endpoint may have processed. */
const goawayLastStream = new WeakMap<http2.Http2Session, number>();

/**
 * Whether the endpoint provably did not process `stream` (RFC 9113 8.7): it refused it
 * (RST_STREAM REFUSED_STREAM), its session's GOAWAY named a last stream below it, or its HEADERS
 * never got a stream id (never submitted). `session` is the stream's session (Node detaches it
 * when the stream closes).
 */
export function provablyUnprocessed(stream: http2.ClientHttp2Stream, session: http2.Http2Session | undefined): boolean {
  if (stream.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM) return true;
  const id = stream.id;
  if (id === undefined || id <= 0) return true;
  const last = session && goawayLastStream.get(session);
  return last !== undefined && id > last;
}

/** One HTTP/2 session to an endpoint (open or opening). */
interface Session {
  ready: Promise<http2.ClientHttp2Session>;
  session?: http2.ClientHttp2Session;
  /** Streams open plus streams promised to requests waiting for {@link ready}. */
  active: number;
  /** The endpoint's SETTINGS_MAX_CONCURRENT_STREAMS (1 until its SETTINGS arrive). */
  maxStreams: number;
  /** Whether the endpoint's SETTINGS arrived. */
  settled: boolean;
  /** Replaced by new TLS material: takes no new streams, closes when its streams are done. */
  retired: boolean;
}

/** A request waiting for a free stream. */
interface Waiter {
  wake(): void;
}

/** One cluster's sessions and upgrade connections: see the module comment. */
export class ClusterSessions {
  /** Tunnel dials made: sessions opened and upgrade connections (for tests and metrics). */
  dials = 0;
  private readonly sessions: Session[] = [];
  private readonly waiters: Waiter[] = [];
  private closed = false;

  constructor(
    readonly cluster: string,
    private readonly dial: Dialer,
    private readonly tls: EndpointTls,
    private readonly maxSessions: number,
    /** The timers of the sessions' SETTINGS deadline and GOAWAY grace (default the kit's `realClock`). */
    private readonly clock: Timers = realClock,
    private readonly liveness: EndpointLiveness = ENDPOINT_LIVENESS,
  ) {}

  /** Sessions open or opening. */
  get sessionCount(): number {
    return this.sessions.length;
  }

  /** Requests waiting for a free stream. */
  get queued(): number {
    return this.waiters.length;
  }

  /**
   * Open a request stream with `headers` (pseudo-headers included); `endStream` when it has no
   * body. Waits for a free stream when every session is full; rejects with the dial's or the
   * session's error, or when `signal` aborts while waiting. With `avoid` (a retry after a stream of
   * that session failed), another session is taken or opened, unless no other can exist.
   */
  async request(
    headers: http2.OutgoingHttpHeaders,
    endStream: boolean,
    signal?: AbortSignal,
    avoid?: http2.Http2Session,
  ): Promise<http2.ClientHttp2Stream> {
    for (let attempt = 0; ; attempt++) {
      const s = await this.acquire(signal, avoid);
      let session: http2.ClientHttp2Session;
      try {
        session = await s.ready;
      } catch (err) {
        this.release(s);
        throw err;
      }
      let stream: http2.ClientHttp2Stream;
      try {
        if (signal?.aborted) throw new Error("the caller went away");
        stream = session.request(headers, { endStream });
      } catch (err) {
        this.release(s);
        // A session that went away between the choice and the request: nothing was sent, retry once.
        if ((session.closed || session.destroyed) && attempt === 0 && !signal?.aborted) continue;
        throw err;
      }
      stream.once("close", () => this.release(s));
      return stream;
    }
  }

  /**
   * A mutual-TLS HTTP/1.1 connection of its own for one upgrade request (never reused: the caller
   * destroys it when the exchange is over).
   */
  upgradeConnection(signal?: AbortSignal): Promise<tls.TLSSocket> {
    if (this.closed) return Promise.reject(new Error("the cluster's connections are closed"));
    this.dials++;
    return connectEndpoint(this.dial, this.cluster, this.tls, "http/1.1", signal);
  }

  /** Take no new streams: every session closes once its streams are done. */
  retire(): void {
    this.closed = true;
    for (const s of this.sessions.splice(0)) {
      s.retired = true;
      if (s.session && s.active === 0) s.session.close();
    }
    for (const w of this.waiters.splice(0)) w.wake();
  }

  /** Close every session now (its streams fail) and fail the waiting requests. */
  destroy(): void {
    this.closed = true;
    for (const s of this.sessions.splice(0)) {
      s.retired = true;
      s.session?.destroy();
      s.ready.then(
        (session) => session.destroy(),
        () => undefined,
      );
    }
    for (const w of this.waiters.splice(0)) w.wake();
  }

  private async acquire(signal?: AbortSignal, avoid?: http2.Http2Session): Promise<Session> {
    for (;;) {
      if (this.closed) throw new Error(`the connections to cluster "${this.cluster}" were closed`);
      if (signal?.aborted) throw new Error("the caller went away");
      // No other session can exist (the avoided one fills the cap): it is the only way.
      if (avoid && this.sessions.length >= this.maxSessions && this.sessions.every((s) => s.session === avoid))
        avoid = undefined;
      // Fill the oldest session first: younger ones empty out and time out at the endpoint.
      const free = this.sessions.find((s) => s.active < s.maxStreams && !(avoid && s.session === avoid));
      if (free) {
        free.active++;
        return free;
      }
      // A session whose SETTINGS have not arrived yet may take more: wait for them (or its failure).
      if (this.sessions.length < this.maxSessions && this.sessions.every((s) => s.settled)) {
        const s = this.open();
        s.active++;
        return s;
      }
      await this.waitForStream(signal);
    }
  }

  private waitForStream(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const waiter: Waiter = {
        wake: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  private wakeOne(): void {
    this.waiters.shift()?.wake();
  }

  private release(s: Session): void {
    s.active--;
    if (s.retired) {
      if (s.active === 0) s.session?.close();
      return;
    }
    this.wakeOne();
  }

  /** Drop `s` from the sessions new streams may use. */
  private drop(s: Session): void {
    const i = this.sessions.indexOf(s);
    if (i >= 0) this.sessions.splice(i, 1);
    // Room for a new session: every waiter may go on (each takes a stream or opens one).
    for (const w of this.waiters.splice(0)) w.wake();
  }

  private open(): Session {
    this.dials++;
    const ready = connectEndpoint(this.dial, this.cluster, this.tls, "h2").then(
      (socket) => this.started(s, socket),
      (err: unknown) => {
        this.drop(s);
        throw err;
      },
    );
    const s: Session = { ready, active: 0, maxStreams: 1, settled: false, retired: false };
    // Each request awaiting `ready` gets the error; this one only keeps it from being unhandled.
    ready.catch(() => undefined);
    this.sessions.push(s);
    return s;
  }

  /** The HTTP/2 session of `s` over its connected `socket`. */
  private started(s: Session, socket: tls.TLSSocket): http2.ClientHttp2Session {
    const session = http2.connect(`https://${GATEWAY_ENDPOINT_HOST}`, { createConnection: () => socket });
    s.session = session;
    // Requests beyond the first wait for the SETTINGS: an endpoint that never sends them must not hold them.
    const noSettings = this.clock.setTimeout(
      () => session.destroy(new Error(`the endpoint sent no HTTP/2 SETTINGS within ${SETTINGS_TIMEOUT_MS} ms`)),
      SETTINGS_TIMEOUT_MS,
    );
    session.once("close", () => this.clock.clearTimeout(noSettings));
    session.on("remoteSettings", (settings: http2.Settings) => {
      this.clock.clearTimeout(noSettings);
      s.maxStreams = Math.max(
        1,
        Math.min(settings.maxConcurrentStreams ?? UNLIMITED_STREAMS_CAP, UNLIMITED_STREAMS_CAP),
      );
      s.settled = true;
      // Every waiter may go on: each takes a stream of this session or opens another one.
      for (const w of this.waiters.splice(0)) w.wake();
    });
    // Streams get their own errors; a session error only ends the session.
    session.on("error", () => this.drop(s));
    session.once("goaway", (_code: number, lastStreamID: number) => {
      goawayLastStream.set(session, lastStreamID);
      this.drop(s);
      const grace = this.clock.setTimeout(
        () =>
          session.destroy(
            new Error(`the endpoint's streams outlived its GOAWAY by ${this.liveness.goawayGraceMs} ms: ended`),
          ),
        this.liveness.goawayGraceMs,
      );
      session.once("close", () => this.clock.clearTimeout(grace));
    });
    session.once("close", () => this.drop(s));
    const { idleMs, timeoutMs, maxIdleMs } = this.liveness;
    // Destroys the session itself when a ping goes unanswered; nothing more to do here.
    probeIdleSession(session, idleMs, timeoutMs, () => undefined, maxIdleMs);
    if (s.retired && s.active === 0) session.close();
    return session;
  }
}

/** The sessions of all clusters. */
export class ClusterPool {
  private readonly clusters = new Map<string, ClusterSessions>();

  constructor(
    private readonly dial: Dialer,
    private tls: EndpointTls,
    private readonly maxSessionsPerCluster: number,
    /** The timers of the sessions' SETTINGS deadlines and GOAWAY grace (default the kit's `realClock`). */
    private readonly clock: Timers = realClock,
    private readonly liveness: EndpointLiveness = ENDPOINT_LIVENESS,
  ) {}

  /** The TLS material new connections use (the fleet view's endpoint probes use it too). */
  get endpointTls(): EndpointTls {
    return this.tls;
  }

  /**
   * Use new TLS material (a renewed gateway identity, a new agent CA bundle) for new
   * connections; the old sessions finish their streams and close.
   */
  renew(tls: EndpointTls): void {
    this.tls = tls;
    for (const c of this.clusters.values()) c.retire();
    this.clusters.clear();
  }

  /** The sessions of `cluster` (created on first use). */
  sessionsFor(cluster: string): ClusterSessions {
    let c = this.clusters.get(cluster);
    if (!c) {
      c = new ClusterSessions(cluster, this.dial, this.tls, this.maxSessionsPerCluster, this.clock, this.liveness);
      this.clusters.set(cluster, c);
    }
    return c;
  }

  /** Drop `cluster`'s sessions (its cluster was removed). */
  forget(cluster: string): void {
    this.clusters.get(cluster)?.destroy();
    this.clusters.delete(cluster);
  }

  /** Close every session. */
  destroy(): void {
    for (const c of this.clusters.values()) c.destroy();
    this.clusters.clear();
  }
}
