/**
 * Test-only: a fake agent gateway endpoint on loopback, reached through an injected dialer (no tunnel),
 * speaking the endpoint's TLS and protocols; what it answers depends on the path.
 * Behaviour: docs/testing/framework.md#fakeendpoint-gateway-unit-tests
 */
import { once } from "node:events";
import type * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { Duplex } from "node:stream";
import type * as tls from "node:tls";
import type { Dialer } from "../cluster-pool.js";

/** What an echo answer holds. */
export interface EchoBody {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  /** The header fields as they arrived, name and value in turn (repeated fields apart). */
  rawHeaders: string[];
}

/** See the module comment. */
export class FakeEndpoint {
  readonly dialed: string[] = [];
  /** TLS connections accepted. */
  connections = 0;
  /** The client certificate subject of each accepted connection. */
  readonly clientSubjects: string[] = [];
  /** HTTP/2 sessions accepted. */
  sessions = 0;
  /** HTTP/2 streams being served now, and the most served at once. */
  openStreams = 0;
  maxOpenStreams = 0;
  /** Upgrade requests received, and the TLS connections they came on (one each, if never reused). */
  readonly upgradeSockets: Duplex[] = [];
  /** Requests being held (`/stream`, `/hold`). */
  readonly held: http2.Http2ServerResponse[] = [];
  /** What `/answer` sends: raw HTTP/2 response headers (`:status` included). */
  answer: http2.OutgoingHttpHeaders = { ":status": 200 };
  /**
   * Called first for every plain request: true when it dealt with it (a fault: a cut session, a
   * GOAWAY, a refused stream); the request is then not served.
   */
  fault: ((req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => boolean) | undefined;
  /** `<method> <url> <body>` of every echoed request, in order (what was processed). */
  readonly served: string[] = [];
  private readonly waiters: (() => void)[] = [];
  private readonly tlsSockets = new Set<tls.TLSSocket>();
  private server: http2.Http2SecureServer | undefined;
  private port = 0;

  constructor(private readonly tls: { cert: Buffer; key: Buffer; ca: Buffer }) {}

  async start(): Promise<void> {
    const server = http2.createSecureServer(
      { ...this.tls, requestCert: true, rejectUnauthorized: true, allowHTTP1: true },
      (req: http2.Http2ServerRequest | http.IncomingMessage, res: http2.Http2ServerResponse | http.ServerResponse) => {
        if ("stream" in req && "stream" in res) this.handle(req, res);
        else if (!("stream" in res)) {
          res.writeHead(505, { connection: "close" });
          res.end("plain requests go over HTTP/2\n");
        }
      },
    );
    server.on("session", (session: http2.ServerHttp2Session) => {
      this.sessions++;
      session.on("stream", (stream) => {
        this.openStreams++;
        this.maxOpenStreams = Math.max(this.maxOpenStreams, this.openStreams);
        stream.once("close", () => this.openStreams--);
      });
    });
    server.on("secureConnection", (socket: tls.TLSSocket) => {
      this.connections++;
      this.tlsSockets.add(socket);
      socket.once("close", () => this.tlsSockets.delete(socket));
      this.clientSubjects.push(socket.getPeerX509Certificate()?.subject ?? "");
    });
    server.on("upgrade", (req: http.IncomingMessage, socket: Duplex) => {
      this.upgradeSockets.push(socket);
      socket.allowHalfOpen = true;
      socket.write(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " +
          String(req.headers.upgrade) +
          "\r\n\r\n",
      );
      socket.on("data", (c: Buffer) => socket.write(c));
      socket.on("end", () => socket.end("bye"));
      socket.on("error", () => socket.destroy());
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    this.server = server;
    this.port = (server.address() as net.AddressInfo).port;
  }

  /** The SETTINGS_MAX_CONCURRENT_STREAMS of sessions accepted from now on. */
  setMaxStreams(n: number): void {
    this.server?.updateSettings({ maxConcurrentStreams: n });
  }

  /** A dialer that records the address and connects to this endpoint. */
  dialer(): Dialer {
    return (address) => {
      this.dialed.push(address);
      const socket = net.connect(this.port, "127.0.0.1");
      return once(socket, "connect").then(() => socket);
    };
  }

  private handle(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse): void {
    if (this.fault?.(req, res)) return;
    const path = req.url;
    if (path.startsWith("/answer")) {
      req.resume();
      // A raw respond(): the compatibility API would refuse some of what a hostile target sends.
      try {
        res.stream.respond(this.answer, { endStream: false });
        res.stream.end("answer\n");
      } catch {
        res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      }
      return;
    }
    if (path.startsWith("/stream")) {
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("first\n");
      this.hold(res);
      return;
    }
    if (path.startsWith("/quiet") || /[?&]fake=quiet(&|$)/.test(path)) {
      res.writeHead(200, { "content-type": "application/json" });
      this.hold(res);
      return;
    }
    if (path.startsWith("/hold")) {
      this.hold(res);
      return;
    }
    if (path.startsWith("/sized")) {
      res.writeHead(200, { "content-type": "text/plain", "content-length": "6" });
      res.write("sized\n");
      this.sized.add(res);
      this.hold(res);
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body: EchoBody & { body: string } = {
        method: req.method,
        url: path,
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body: Buffer.concat(chunks).toString(),
      };
      this.served.push(`${req.method} ${path} ${body.body}`);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    });
  }

  /** Held `/sized` responses (their body is complete: released without more). */
  private readonly sized = new WeakSet<http2.Http2ServerResponse>();

  private hold(res: http2.Http2ServerResponse): void {
    this.held.push(res);
    for (const w of this.waiters.splice(0)) w();
  }

  /** Resolves once `n` requests are held. */
  async heldCount(n: number): Promise<void> {
    while (this.held.length < n) await new Promise<void>((r) => this.waiters.push(r));
  }

  /** End every held response (a held stream gets `last\n`). */
  release(): void {
    for (const res of this.held.splice(0)) {
      if (this.sized.has(res)) {
        res.end();
        continue;
      }
      if (!res.headersSent) res.writeHead(200, { "content-type": "text/plain" });
      res.end("last\n");
    }
  }

  async close(): Promise<void> {
    this.release();
    const server = this.server;
    if (!server) return;
    for (const s of this.upgradeSockets) s.destroy();
    const closed = new Promise<void>((r) => server.close(() => r()));
    for (const s of this.tlsSockets) s.destroy();
    await closed;
  }
}
