/**
 * HTTP/2 to the kube-apiserver: the endpoint's non-upgrade requests as streams of multiplexed sessions
 * when the apiserver picks `h2`; otherwise {@link H2Upstream.open} answers `undefined` (HTTP/1.1).
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import * as http2 from "node:http2";
import { isIP } from "node:net";
import * as tls from "node:tls";

/** Where and how {@link H2Upstream} connects. */
export interface H2UpstreamSettings {
  /** The `https:` origin. */
  origin: URL;
  /** The trust bundle the server certificate is verified against. */
  ca: Buffer;
  /** Close a session without streams after this long. */
  idleMs: number;
}

/** One session and its bookkeeping. */
interface Session {
  session: http2.ClientHttp2Session;
  /** Streams open on it. */
  active: number;
  /** Takes no new streams (GOAWAY, error, close, idle close). */
  retired: boolean;
  idle: NodeJS.Timeout | undefined;
}

/** How many sessions {@link H2Upstream.open} may find gone (or without room) before it gives up. */
const MAX_FAILURES = 4;

/** The streams a session may carry at once, as its peer announced. */
function streamLimit(s: Session): number {
  return s.session.remoteSettings.maxConcurrentStreams ?? 100;
}

/** The HTTP/2 sessions to one origin; see the module comment. */
export class H2Upstream {
  private readonly sessions: Session[] = [];
  private connecting: Promise<Session | undefined> | undefined;
  /** The origin picked HTTP/1.1 by ALPN. */
  private http1Only = false;
  private closed = false;

  constructor(private readonly settings: H2UpstreamSettings) {}

  /**
   * Open a stream for a request with `headers` (pseudo-headers included); `endStream` when it has
   * no body. Resolves `undefined` when the origin speaks only HTTP/1.1; rejects when it cannot
   * be reached within `connectTimeoutMs`.
   */
  async open(
    headers: http2.OutgoingHttpHeaders,
    endStream: boolean,
    connectTimeoutMs: number,
  ): Promise<http2.ClientHttp2Stream | undefined> {
    // Sessions may fill up (other requests took the room: look again, a new session has room) or
    // go away while one is being opened (a few times only: a peer may refuse every session).
    let failures = 0;
    while (failures < MAX_FAILURES) {
      if (this.http1Only) return undefined;
      if (this.closed) throw new Error("the gateway endpoint is closing");
      const free = this.sessions.find((s) => !s.retired && s.active < streamLimit(s));
      // Everything is full (or nothing is open): wait for a connect under way, else start one.
      const s = free ?? (await (this.connecting ?? this.connectOnce(connectTimeoutMs)));
      if (s === undefined) return undefined;
      if (s.retired || streamLimit(s) === 0) failures += 1;
      if (!s.retired && streamLimit(s) === 0) {
        // A session that may carry no stream is of no use.
        this.retire(s);
        s.session.close();
      }
      if (s.retired || s.active >= streamLimit(s)) continue;
      try {
        return this.stream(s, headers, endStream);
      } catch (err) {
        // The session went away between the look and the request: try another.
        if (!s.session.closed && !s.session.destroyed) throw err;
        this.retire(s);
        failures += 1;
      }
    }
    throw new Error("no HTTP/2 session to the upstream could take the request");
  }

  /** Close every session at once. */
  close(): void {
    this.closed = true;
    for (const s of [...this.sessions]) {
      this.retire(s);
      s.session.destroy();
    }
  }

  /** Close idle sessions gracefully; running streams finish (a CA change replaces this upstream). */
  retireAll(): void {
    for (const s of [...this.sessions]) {
      this.retire(s);
      s.session.close();
    }
  }

  private stream(s: Session, headers: http2.OutgoingHttpHeaders, endStream: boolean): http2.ClientHttp2Stream {
    const stream = s.session.request(headers, { endStream });
    s.active += 1;
    if (s.idle) clearTimeout(s.idle);
    s.idle = undefined;
    stream.once("close", () => {
      s.active -= 1;
      if (s.active === 0 && !s.retired) {
        s.idle = setTimeout(() => {
          this.retire(s);
          s.session.close();
        }, this.settings.idleMs);
        s.idle.unref();
      }
    });
    return stream;
  }

  private connectOnce(timeoutMs: number): Promise<Session | undefined> {
    const pending = this.connect(timeoutMs).finally(() => {
      if (this.connecting === pending) this.connecting = undefined;
    });
    this.connecting = pending;
    return pending;
  }

  /** Connect offering `h2` and `http/1.1`; a session when `h2` was picked, else undefined. */
  private async connect(timeoutMs: number): Promise<Session | undefined> {
    const { origin, ca } = this.settings;
    const host = origin.hostname.startsWith("[") ? origin.hostname.slice(1, -1) : origin.hostname;
    const port = origin.port ? Number(origin.port) : 443;
    const socket = tls.connect({
      host,
      port,
      ca,
      minVersion: "TLSv1.2",
      ALPNProtocols: ["h2", "http/1.1"],
      // SNI for names only (as the HTTP/1.1 pool); the certificate is checked against `host` either way.
      ...(isIP(host) ? {} : { servername: host }),
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => socket.destroy(new Error(`connect timeout after ${timeoutMs} ms`)), timeoutMs);
      const onError = (err: Error): void => {
        clearTimeout(timer);
        reject(err);
      };
      socket.once("error", onError);
      socket.once("secureConnect", () => {
        clearTimeout(timer);
        socket.off("error", onError);
        resolve();
      });
    });
    if (socket.alpnProtocol !== "h2") {
      socket.destroy();
      this.http1Only = true;
      return undefined;
    }
    const session = http2.connect(origin, { createConnection: () => socket });
    const s: Session = { session, active: 0, retired: false, idle: undefined };
    session.on("error", () => this.retire(s));
    session.on("goaway", () => this.retire(s));
    session.once("close", () => this.retire(s));
    // The peer's stream limit is known once its SETTINGS arrived.
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        session.destroy();
        reject(new Error(`connect timeout after ${timeoutMs} ms (no HTTP/2 settings)`));
      }, timeoutMs);
      const done = (err?: Error): void => {
        clearTimeout(timer);
        session.off("remoteSettings", onSettings);
        session.off("close", onClose);
        if (err) reject(err);
        else resolve();
      };
      const onSettings = (): void => done();
      const onClose = (): void => done(new Error("the HTTP/2 session closed before its settings"));
      session.once("remoteSettings", onSettings);
      session.once("close", onClose);
    });
    if (this.closed) {
      session.destroy();
      throw new Error("the gateway endpoint is closing");
    }
    this.sessions.push(s);
    return s;
  }

  private retire(s: Session): void {
    s.retired = true;
    if (s.idle) clearTimeout(s.idle);
    s.idle = undefined;
    const at = this.sessions.indexOf(s);
    if (at >= 0) this.sessions.splice(at, 1);
  }
}
