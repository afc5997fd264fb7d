/**
 * Test-only: a {@link ServerTunnel} over a fake server stream (no HTTP/2 underneath): the test
 * feeds it server frames with `receive`, reads what it sent, and decides what the stream's send
 * returns and when it drains.
 */
import { EventEmitter } from "node:events";
import type * as http2 from "node:http2";
import {
  PacketType,
  decodeFlowControl,
  decodePacket,
  encodePacket,
  type FlowControl,
  type Packet,
} from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame, type ClientCall } from "@cluster-proxy/tunnel";
import { silentLogger } from "@cluster-proxy/kit";
import { AgentMetrics } from "../metrics.js";
import { ServerTunnel, type ServerTunnelDeps } from "../tunnel/server-tunnel.js";
import { waitUntil } from "@cluster-proxy/tunnel/testing";

/** The server stream a tunnel writes to. */
export class FakeServerCall extends EventEmitter {
  readonly sent: Buffer[] = [];
  paused = false;
  pauses = 0;
  bufferedBytes = 0;
  closed = false;

  /** @param congested every send returns false (backed up) until the test emits "drain". */
  constructor(private readonly congested = false) {
    super();
  }

  send(frame: Buffer): boolean {
    this.sent.push(frame);
    return !this.congested;
  }
  sendControl(frame: Buffer): boolean {
    return this.send(frame);
  }
  pause(): void {
    this.paused = true;
    this.pauses++;
  }
  resume(): void {
    this.paused = false;
  }
  abort(): void {
    this.closed = true;
  }
  /** The tunnel half-closed the stream (END_STREAM); `sent.length` at that moment. */
  endedAfter: number | undefined;
  end(): void {
    this.endedAfter ??= this.sent.length;
  }

  /** The konnectivity packets sent (FLOW packets left out). */
  packets(): Packet[] {
    return this.sent
      .filter((f) => !decodeFlowControl(f.subarray(FRAME_HEADER)))
      .map((f) => decodePacket(f.subarray(FRAME_HEADER)));
  }

  /** The FLOW_PAUSE / FLOW_RESUME packets sent. */
  flows(): { type: FlowControl; connectID: bigint }[] {
    return this.sent.flatMap((f) => decodeFlowControl(f.subarray(FRAME_HEADER)) ?? []);
  }

  /** DATA bytes per connection in the frames sent from index `from` on. */
  dataBytes(ids: readonly bigint[], from = 0): Map<bigint, number> {
    const m = new Map<bigint, number>(ids.map((id) => [id, 0]));
    for (const f of this.sent.slice(from)) {
      if (decodeFlowControl(f.subarray(FRAME_HEADER))) continue;
      const p = decodePacket(f.subarray(FRAME_HEADER));
      if ("data" in p) m.set(p.data.connectID, (m.get(p.data.connectID) ?? 0) + p.data.data.length);
    }
    return m;
  }
}

/** A session that never closes by itself: a graceful close() waits for destroy(). */
class FakeSession extends EventEmitter {
  destroyed = false;
  closing = false;
  close(): void {
    this.closing = true;
  }
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.emit("close");
  }
}

/** A tunnel on `call` with test defaults (quiet, 2 s dial timeout), overridden by `deps`. */
export function tunnelOver(call: FakeServerCall, deps: Partial<ServerTunnelDeps> = {}): ServerTunnel {
  return new ServerTunnel(
    "server-1",
    new FakeSession() as unknown as http2.ClientHttp2Session,
    call as unknown as ClientCall,
    {
      addressing: { clusterName: "", apiserverAddress: "" },
      dialTimeoutMs: 2000,
      metrics: new AgentMetrics(),
      logger: silentLogger,
      beginEndpoint: () => () => undefined,
      ...deps,
    },
  );
}

/** A sealed frame of `packet`, as the server sends it. */
function serverFrame(packet: Packet): Buffer {
  return sealFrame(encodePacket(packet, FRAME_HEADER));
}

/** Dial 127.0.0.1:`port` through the tunnel; resolves with the connectID once the endpoint is connected. */
export async function dialThrough(
  t: ServerTunnel,
  call: FakeServerCall,
  port: number,
  random: bigint,
): Promise<bigint> {
  t.receive(
    serverFrame({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: `127.0.0.1:${port}`, random } }),
  );
  let id = 0n;
  await waitUntil(
    "DIAL_RSP",
    () =>
      call.packets().some((p) => {
        if ("dialResponse" in p && p.dialResponse.random === random) id = p.dialResponse.connectID;
        return id !== 0n;
      }),
    { timeoutMs: 10_000 },
  );
  return id;
}

/** Send a DIAL_REQ for `address` and resolve with the DIAL_RSP the tunnel answers. */
export async function dialAddress(
  t: ServerTunnel,
  call: FakeServerCall,
  address: string,
  random: bigint,
): Promise<{ connectID: bigint; error: string }> {
  t.receive(serverFrame({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address, random } }));
  let answer: { connectID: bigint; error: string } | undefined;
  await waitUntil(
    "DIAL_RSP",
    () =>
      call.packets().some((p) => {
        if ("dialResponse" in p && p.dialResponse.random === random) answer = p.dialResponse;
        return answer !== undefined;
      }),
    { timeoutMs: 10_000 },
  );
  if (!answer) throw new Error("no DIAL_RSP");
  return answer;
}
