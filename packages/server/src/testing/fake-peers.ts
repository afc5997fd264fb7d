/**
 * Test-only: minimal konnectivity peers speaking raw packets through the tunnel package, to drive
 * a ProxyServer in-process: a fake agent (`/AgentService/Connect`) and a fake gRPC client
 * (`/ProxyService/Proxy`), each with a queue of decoded packets.
 */
import type * as http2 from "node:http2";
import { AGENT_CONNECT_METHOD, Metadata, PROXY_METHOD, decodePacket, type Packet } from "@cluster-proxy/protocol";
import {
  FRAME_HEADER,
  connectSession,
  openCall,
  sendPacket,
  type ClientCall,
  type ConnectTarget,
  type StreamStatus,
} from "@cluster-proxy/tunnel";

/** Decoded packets of a call, consumed in order. */
export class PacketQueue {
  private readonly packets: Packet[] = [];
  private waiters: { resolve: (p: Packet) => void; reject: (e: Error) => void }[] = [];
  status: StreamStatus | undefined;
  /** True if a packet arrived before the response headers. */
  packetBeforeHeaders = false;

  constructor(readonly call: ClientCall) {
    call.on("message", (frame) => {
      if (!call.responseHeaders) this.packetBeforeHeaders = true;
      const p = decodePacket(frame.subarray(FRAME_HEADER));
      const w = this.waiters.shift();
      if (w) w.resolve(p);
      else this.packets.push(p);
    });
    // The server finished: close our side too so the HTTP/2 stream closes and reports the status.
    // (RST_STREAM NO_ERROR, not end(): on Node 20 an end() here, with client and server in one
    // process over TLS, was seen to spin node's HTTP/2 session in native code.)
    call.on("halfClose", () => {
      if (!call.http2Stream.destroyed) call.http2Stream.close();
    });
    call.on("close", (status) => {
      this.status = status;
      const waiters = this.waiters;
      this.waiters = [];
      for (const w of waiters) w.reject(new Error(`call closed: ${status.code} ${status.details}`));
    });
  }

  /** The next packet; rejects if the call ends first or after `timeoutMs`. */
  next(timeoutMs = 5000): Promise<Packet> {
    const p = this.packets.shift();
    if (p) return Promise.resolve(p);
    if (this.status) return Promise.reject(new Error(`call closed: ${this.status.code} ${this.status.details}`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`no packet within ${timeoutMs} ms`));
      }, timeoutMs);
      const waiter = {
        resolve: (pk: Packet) => {
          clearTimeout(timer);
          resolve(pk);
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.waiters.push(waiter);
    });
  }

  /** Resolve with the final status of the call; rejects if it has not ended after `timeoutMs`. */
  closed(timeoutMs = 5000): Promise<StreamStatus> {
    if (this.status) return Promise.resolve(this.status);
    return new Promise((resolve, reject) => {
      const onClose = (status: StreamStatus): void => {
        clearTimeout(timer);
        resolve(status);
      };
      const timer = setTimeout(() => {
        this.call.off("close", onClose);
        reject(new Error(`call not closed within ${timeoutMs} ms`));
      }, timeoutMs);
      this.call.once("close", onClose);
    });
  }

  send(packet: Packet): boolean {
    return sendPacket(this.call, packet);
  }
}

export interface FakePeer {
  session: http2.ClientHttp2Session;
  call: ClientCall;
  packets: PacketQueue;
  close(): void;
}

/** Open an agent stream with the given metadata (values as sent; `undefined` omits the key). */
export async function connectFakeAgent(
  target: ConnectTarget,
  metadata: { agentid?: string; agentidentifiers?: string; authorization?: string },
): Promise<FakePeer> {
  const session = await connectSession(target);
  const md: Record<string, string> = {};
  if (metadata.agentid !== undefined) md[Metadata.agentID] = metadata.agentid;
  if (metadata.agentidentifiers !== undefined) md[Metadata.agentIdentifiers] = metadata.agentidentifiers;
  if (metadata.authorization !== undefined) md[Metadata.authorization] = metadata.authorization;
  const call = openCall(session, AGENT_CONNECT_METHOD, { metadata: md });
  const packets = new PacketQueue(call);
  return { session, call, packets, close: () => session.destroy() };
}

/** Open a Proxy stream (one single-use tunnel). */
export async function connectFakeClient(target: ConnectTarget): Promise<FakePeer> {
  const session = await connectSession(target);
  const call = openCall(session, PROXY_METHOD);
  const packets = new PacketQueue(call);
  return { session, call, packets, close: () => session.destroy() };
}
