/**
 * Test-only fake of the hub's gRPC front door that also plays the agent, so client tests need no real
 * server; what it does depends on the dial address.
 * Behaviour: docs/testing/framework.md#fakeproxyserver-client-unit-tests
 */
import { EventEmitter } from "node:events";
import * as http2 from "node:http2";
import * as net from "node:net";
import {
  FRAME_HEADER,
  TUNNEL_HTTP2_OPTIONS,
  sendData,
  sendPacket,
  serveGrpc,
  type ServerCall,
} from "@cluster-proxy/tunnel";
import { DialErrors, PROXY_METHOD, PacketType, decodePacket, type Packet } from "@cluster-proxy/protocol";
import type { TestPki } from "@cluster-proxy/pki/testing";

/** A packet the fake received, with the size of its encoded message and the call it came on. */
export interface ReceivedPacket {
  packet: Packet;
  messageBytes: number;
  callId: number;
}

export interface FakeProxyServerOptions {
  /** mTLS on 127.0.0.1 with this PKI; without it, plain HTTP/2 on `udsPath`. */
  pki?: TestPki;
  udsPath?: string;
  /** Dial address -> real TCP target. */
  targets?: Record<string, { host: string; port: number }>;
}

interface FakeEvents {
  packet: [ReceivedPacket];
  sessionClosed: [];
  callClosed: [callId: number];
}

export class FakeProxyServer extends EventEmitter<FakeEvents> {
  readonly received: ReceivedPacket[] = [];
  /** TLS connections accepted (TCP mode). */
  tlsConnections = 0;
  /** HTTP/2 sessions opened / closed. */
  sessionsOpened = 0;
  sessionsClosed = 0;
  /** Calls closed (by either side). */
  callsClosed = 0;
  /** Times an echo or relay send was pushed back by HTTP/2 flow control. */
  pushedBack = 0;
  port = 0;
  /** How many `draining:1` dials are refused as draining before they are served. */
  drainingRefusals = 1;
  private readonly server: http2.Http2SecureServer | http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private nextConnectID = 1n;
  private nextCallId = 1;

  constructor(private readonly options: FakeProxyServerOptions) {
    super();
    if (options.pki) {
      this.server = http2.createSecureServer({
        ...TUNNEL_HTTP2_OPTIONS,
        key: options.pki.serverKey,
        cert: options.pki.serverCert,
        ca: options.pki.clientCa,
        requestCert: true,
        rejectUnauthorized: true,
      });
      this.server.on("secureConnection", () => this.tlsConnections++);
    } else {
      this.server = http2.createServer({ ...TUNNEL_HTTP2_OPTIONS });
    }
    this.server.on("session", (session: http2.ServerHttp2Session) => {
      this.sessionsOpened++;
      this.sessions.add(session);
      session.on("error", () => undefined);
      session.once("close", () => {
        this.sessions.delete(session);
        this.sessionsClosed++;
        this.emit("sessionClosed");
      });
    });
    serveGrpc(this.server, { [PROXY_METHOD]: (call) => this.serve(call) });
  }

  /** Listen on 127.0.0.1 (random port) or the Unix socket. */
  async start(): Promise<this> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      if (this.options.udsPath) this.server.listen(this.options.udsPath, resolve);
      else this.server.listen(0, "127.0.0.1", resolve);
    });
    const addr = this.server.address();
    if (addr && typeof addr === "object") this.port = addr.port;
    return this;
  }

  /** Resolve with the first received packet (past or future) matching `pred`. */
  waitForPacket(pred: (p: ReceivedPacket) => boolean, timeoutMs = 15_000): Promise<ReceivedPacket> {
    const found = this.received.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const on = (p: ReceivedPacket): void => {
        if (!pred(p)) return;
        clearTimeout(timer);
        this.off("packet", on);
        resolve(p);
      };
      const timer = setTimeout(() => {
        this.off("packet", on);
        reject(new Error(`no matching packet within ${timeoutMs} ms`));
      }, timeoutMs);
      this.on("packet", on);
    });
  }

  /** Resolve once `sessionsClosed` reaches `count`. */
  waitForSessionsClosed(count: number): Promise<void> {
    return this.waitFor("sessionClosed", () => this.sessionsClosed >= count);
  }

  /** Resolve once `callsClosed` reaches `count`. */
  waitForCallsClosed(count: number): Promise<void> {
    return this.waitFor("callClosed", () => this.callsClosed >= count);
  }

  private waitFor(event: "sessionClosed" | "callClosed", done: () => boolean, timeoutMs = 30_000): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const on = (): void => {
        if (!done()) return;
        clearTimeout(timer);
        this.off(event, on);
        resolve();
      };
      const timer = setTimeout(() => {
        this.off(event, on);
        reject(new Error(`${event} count not reached within ${timeoutMs} ms`));
      }, timeoutMs);
      this.on(event, on);
    });
  }

  /** Kill every session abruptly (the hub going away). */
  destroySessions(): void {
    for (const s of this.sessions) s.destroy();
  }

  async close(): Promise<void> {
    this.destroySessions();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private serve(call: ServerCall): void {
    const callId = this.nextCallId++;
    let connectID = 0n;
    let target: net.Socket | undefined;
    const closeRsp = (id: bigint, error = ""): void => {
      sendPacket(call, { type: PacketType.CLOSE_RSP, closeResponse: { connectID: id, error } });
    };
    const toClient = (data: Uint8Array, pauseSource: () => void): void => {
      if (!sendData(call, connectID, data)) {
        this.pushedBack++;
        pauseSource();
      }
    };
    call.on("drain", () => {
      call.resume();
      target?.resume();
    });
    call.on("close", () => {
      target?.destroy();
      this.callsClosed++;
      this.emit("callClosed", callId);
    });
    call.on("message", (frame) => {
      const packet = decodePacket(frame.subarray(FRAME_HEADER));
      const rec = { packet, messageBytes: frame.length - FRAME_HEADER, callId };
      this.received.push(rec);
      this.emit("packet", rec);
      if ("dialRequest" in packet) {
        const { address, random } = packet.dialRequest;
        if (address === "hold:1") return;
        if (address === "draining:1" && this.drainingRefusals > 0) {
          this.drainingRefusals--;
          call.http2Stream.session?.close();
          sendPacket(call, {
            type: PacketType.DIAL_RSP,
            dialResponse: { random, connectID: 0n, error: DialErrors.serverDraining },
          });
          return;
        }
        if (address === "noagent:1") {
          sendPacket(call, {
            type: PacketType.DIAL_RSP,
            dialResponse: { random, connectID: 0n, error: "No agent available" },
          });
          return;
        }
        if (address === "decoy:1") {
          sendPacket(call, {
            type: PacketType.DIAL_RSP,
            dialResponse: { random: random ^ 1n, connectID: 99n, error: "decoy" },
          });
        }
        connectID = this.nextConnectID++;
        const dest = this.options.targets?.[address];
        if (!dest) {
          sendPacket(call, { type: PacketType.DIAL_RSP, dialResponse: { random, connectID, error: "" } });
          return;
        }
        const sock = net.connect(dest.port, dest.host);
        target = sock;
        const id = connectID;
        sock.on("connect", () =>
          sendPacket(call, { type: PacketType.DIAL_RSP, dialResponse: { random, connectID: id, error: "" } }),
        );
        sock.on("data", (chunk: Buffer) => toClient(chunk, () => sock.pause()));
        sock.on("drain", () => call.resume());
        sock.on("error", () => undefined);
        sock.on("close", () => closeRsp(id));
        return;
      }
      if ("data" in packet) {
        if (packet.data.connectID !== connectID) {
          closeRsp(packet.data.connectID, "unrecognized connectID");
          return;
        }
        if (target) {
          if (!target.write(packet.data.data)) call.pause();
        } else {
          toClient(packet.data.data, () => call.pause());
        }
        return;
      }
      if ("closeRequest" in packet) {
        if (target)
          target.destroy(); // its "close" answers CLOSE_RSP
        else closeRsp(packet.closeRequest.connectID);
      }
    });
  }
}
