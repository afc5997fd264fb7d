/**
 * Test-only: a minimal proxy server's agent port (mTLS HTTP/2 + gRPC `/AgentService/Connect`)
 * that records agent metadata, answers with `serverid`/`servercount` headers at once, and lets a
 * test send packets and await the agent's packets. Plus a TCP echo server and a TCP relay
 * (round-robin balancer that can be frozen to simulate a half-open server).
 */
import { randomBytes } from "node:crypto";
import { EventEmitter, once } from "node:events";
import * as http2 from "node:http2";
import * as net from "node:net";
import type * as tls from "node:tls";
import { AGENT_CONNECT_METHOD, Metadata, decodePacket, type Packet } from "@cluster-proxy/protocol";
import {
  FRAME_HEADER,
  TUNNEL_HTTP2_OPTIONS,
  sendPacket,
  serveGrpc,
  type ServerCall,
  type StreamStatus,
} from "@cluster-proxy/tunnel";
import type { TestPki } from "@cluster-proxy/pki/testing";
import { listenTcp, type TcpEndpoint } from "./tcp-endpoints.js";

/** One agent stream as the fake server sees it. */
export class FakeAgentStream {
  readonly packets: Packet[] = [];
  private readonly events = new EventEmitter();
  status: StreamStatus | undefined;

  constructor(readonly call: ServerCall) {
    call.on("message", (frame) => {
      this.packets.push(decodePacket(frame.subarray(FRAME_HEADER)));
      this.events.emit("packet");
    });
    // As the proxy-server does: the agent ending its stream ends the call (OK).
    call.on("halfClose", () => call.finish({ code: 0, details: "" }));
    call.on("close", (status) => {
      this.status = status;
      this.events.emit("close");
    });
  }

  /** A metadata value sent by the agent (undefined when absent). */
  meta(key: string): string | undefined {
    const v = this.call.metadata[key];
    return Array.isArray(v) ? v.join(", ") : v;
  }

  send(packet: Packet): void {
    sendPacket(this.call, packet);
  }

  /** The first packet (received so far or later) matching `match` that was not taken yet. */
  async next(match: (p: Packet) => boolean = () => true, timeoutMs = 5000): Promise<Packet> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.packets.findIndex(match);
      if (i >= 0) return this.packets.splice(i, 1)[0]!;
      const left = deadline - Date.now();
      if (left <= 0 || this.status) throw new Error(`no matching packet within ${timeoutMs} ms`);
      await waitEvent(this.events, ["packet", "close"], left);
    }
  }

  /** Resolves when the stream has ended. */
  async closed(timeoutMs = 5000): Promise<StreamStatus> {
    if (!this.status) await waitEvent(this.events, ["close"], timeoutMs);
    if (!this.status) throw new Error(`stream still open after ${timeoutMs} ms`);
    return this.status;
  }
}

/** Resolve on the first of `names` or after `ms`, removing every listener and the timer. */
function waitEvent(emitter: EventEmitter, names: string[], ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      for (const n of names) emitter.off(n, done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const n of names) emitter.once(n, done);
  });
}

export interface FakeProxyServerOptions {
  serverID: string;
  serverCount: number;
}

/** The agent port of a fake proxy server. */
export class FakeProxyServer {
  readonly streams: FakeAgentStream[] = [];
  private readonly events = new EventEmitter();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private server: http2.Http2SecureServer | undefined;
  port = 0;
  /** Whether each TLS connection resumed a session (in order); the ticket key outlives restarts. */
  readonly resumed: boolean[] = [];
  private readonly ticketKeys = randomBytes(48);

  constructor(
    private readonly pki: TestPki,
    readonly options: FakeProxyServerOptions,
  ) {}

  /** Listen on 127.0.0.1 (port 0: any free port; reuse the old port after a restart). */
  async listen(port = this.port): Promise<number> {
    const server = http2.createSecureServer({
      ...TUNNEL_HTTP2_OPTIONS,
      key: this.pki.serverKey,
      cert: this.pki.serverCert,
      ca: this.pki.agentCa,
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ["h2"],
      ticketKeys: this.ticketKeys,
    });
    server.on("secureConnection", (socket: tls.TLSSocket) => this.resumed.push(socket.isSessionReused()));
    server.on("session", (s) => {
      this.sessions.add(s);
      s.on("close", () => this.sessions.delete(s));
      s.on("error", () => undefined);
    });
    serveGrpc(server, {
      [AGENT_CONNECT_METHOD]: (call) => {
        call.sendHeaders({
          [Metadata.serverID]: this.options.serverID,
          [Metadata.serverCount]: String(this.options.serverCount),
        });
        const stream = new FakeAgentStream(call);
        this.streams.push(stream);
        this.events.emit("stream", stream);
      },
    });
    server.listen(port, "127.0.0.1");
    await once(server, "listening");
    this.server = server;
    this.port = (server.address() as net.AddressInfo).port;
    return this.port;
  }

  /** The n-th stream (0-based) an agent opened, waiting for it if needed. */
  async stream(n = 0, timeoutMs = 5000): Promise<FakeAgentStream> {
    const deadline = Date.now() + timeoutMs;
    while (this.streams.length <= n) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`server ${this.options.serverID}: no stream #${n} within ${timeoutMs} ms`);
      await waitEvent(this.events, ["stream"], left);
    }
    return this.streams[n]!;
  }

  /** Streams that are still open. */
  openStreams(): FakeAgentStream[] {
    return this.streams.filter((s) => !s.status);
  }

  /** GOAWAY on every session, as a draining proxy-server does (streams go on). */
  goaway(): void {
    for (const s of this.sessions) s.close();
  }

  /** Destroy every session but keep listening (the agent reconnects). */
  dropSessions(): void {
    for (const s of this.sessions) s.destroy();
  }

  /** Stop listening and destroy every session (the agent sees its streams die). */
  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sessions) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** A TCP echo server on 127.0.0.1 that tracks its sockets. */
export function startEchoServer(): Promise<TcpEndpoint> {
  return listenTcp((s) => s.pipe(s));
}

/**
 * A TCP relay on 127.0.0.1: each new connection goes to the next target port (round robin).
 * `freeze()` stops forwarding in both directions without closing anything (a half-open peer).
 */
export class TcpBalancer {
  private next = 0;
  private frozen = false;
  private readonly sockets = new Set<net.Socket>();
  private readonly server: net.Server;
  port = 0;

  constructor(private readonly targets: () => number[]) {
    this.server = net.createServer((client) => this.relay(client));
  }

  async listen(): Promise<number> {
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.port = (this.server.address() as net.AddressInfo).port;
    return this.port;
  }

  freeze(): void {
    this.frozen = true;
  }

  private relay(client: net.Socket): void {
    const ports = this.targets();
    const port = ports[this.next++ % ports.length]!;
    const upstream = net.connect(port, "127.0.0.1");
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
      s.on("error", () => undefined);
    }
    client.on("data", (d: Buffer) => void (this.frozen || upstream.write(d)));
    upstream.on("data", (d: Buffer) => void (this.frozen || client.write(d)));
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
