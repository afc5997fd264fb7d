/**
 * Test-only: a fake agent gateway endpoint on loopback, reached through an injected dialer (no
 * tunnel): TLS requiring a client certificate from the gateway CA, serving an agent certificate
 * with the cluster's URI SAN. It answers
 *
 * - `/stream`: the head and a first chunk at once, the rest when {@link FakeEndpoint.release} is called;
 * - `/quiet`, or any path with `fake=quiet` in its query: the head at once and no body until
 *   released (a watch with no events yet);
 * - `/hold`: nothing until released (to fill a pool);
 * - any other path: 200 with a JSON echo of method, url and headers;
 * - an upgrade: 101, then echoes every byte; when the caller ends its side it writes `bye` and ends.
 */
import { once } from "node:events";
import type * as http from "node:http";
import * as https from "node:https";
import * as net from "node:net";
import type { Duplex } from "node:stream";
import type * as tls from "node:tls";
import type { Dialer } from "../cluster-pool.js";

/** What an echo answer holds. */
export interface EchoBody {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
}

/** See the module comment. */
export class FakeEndpoint {
  readonly dialed: string[] = [];
  /** TLS connections accepted. */
  connections = 0;
  /** The client certificate subject of each accepted connection. */
  readonly clientSubjects: string[] = [];
  /** Requests being held (`/stream`, `/hold`). */
  readonly held: http.ServerResponse[] = [];
  private readonly waiters: (() => void)[] = [];
  private server: https.Server | undefined;
  private port = 0;

  constructor(private readonly tls: { cert: Buffer; key: Buffer; ca: Buffer }) {}

  async start(): Promise<void> {
    const server = https.createServer({ ...this.tls, requestCert: true, rejectUnauthorized: true }, (req, res) =>
      this.handle(req, res),
    );
    server.on("secureConnection", (socket: tls.TLSSocket) => {
      this.connections++;
      this.clientSubjects.push(socket.getPeerX509Certificate()?.subject ?? "");
    });
    server.on("upgrade", (req: http.IncomingMessage, socket: Duplex) => {
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

  /** A dialer that records the address and connects to this endpoint. */
  dialer(): Dialer {
    return (address) => {
      this.dialed.push(address);
      const socket = net.connect(this.port, "127.0.0.1");
      return once(socket, "connect").then(() => socket);
    };
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const path = req.url ?? "/";
    if (path.startsWith("/stream")) {
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("first\n");
      this.hold(res);
      return;
    }
    if (path.startsWith("/quiet") || /[?&]fake=quiet(&|$)/.test(path)) {
      res.writeHead(200, { "content-type": "application/json" });
      res.flushHeaders();
      this.hold(res);
      return;
    }
    if (path.startsWith("/hold")) {
      this.hold(res);
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body: EchoBody & { body: string } = {
        method: req.method ?? "",
        url: path,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    });
  }

  private hold(res: http.ServerResponse): void {
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
      if (!res.headersSent) res.writeHead(200, { "content-type": "text/plain" });
      res.end("last\n");
    }
  }

  async close(): Promise<void> {
    this.release();
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}
