/**
 * Round robin between busy endpoints of one tunnel: while the server stream is backed up, each
 * endpoint socket reads one quantum per turn (between the stream's "drain" events), so one
 * endpoint with a full kernel buffer cannot take the whole stream.
 */
import assert from "node:assert/strict";
import { EventEmitter, once } from "node:events";
import type * as http2 from "node:http2";
import * as net from "node:net";
import { test } from "node:test";
import { PacketType, decodePacket, encodePacket, type Packet } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame, silentLogger, type ClientCall } from "@cluster-proxy/tunnel";
import { AgentMetrics } from "./metrics.js";
import { ENDPOINT_SEND_QUANTUM, ServerTunnel } from "./server-tunnel.js";

/** A server stream that is always backed up: every send returns false until the test emits "drain". */
class CongestedCall extends EventEmitter {
  readonly sent: Buffer[] = [];
  bufferedBytes = 0;
  closed = false;
  send(frame: Buffer): boolean {
    this.sent.push(frame);
    return false;
  }
  pause(): void {}
  resume(): void {}
  abort(): void {
    this.closed = true;
  }
  packets(): Packet[] {
    return this.sent.map((f) => decodePacket(f.subarray(FRAME_HEADER)));
  }
}

async function waitUntil(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Endpoints that write far more than a test reads: their kernel buffers stay full. */
async function sourceServer(): Promise<{ port: number; close: () => void }> {
  const payload = Buffer.alloc(8 * 1024 * 1024, 0x61);
  const accepted: net.Socket[] = [];
  const srv = net.createServer((s) => {
    s.on("error", () => undefined);
    accepted.push(s);
    s.end(payload);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  return {
    port: (srv.address() as net.AddressInfo).port,
    close: () => {
      for (const s of accepted) s.destroy();
      srv.close();
    },
  };
}

function tunnel(): { t: ServerTunnel; call: CongestedCall } {
  const call = new CongestedCall();
  const session = Object.assign(new EventEmitter(), { destroyed: false, destroy: () => undefined });
  const t = new ServerTunnel(
    "server-1",
    session as unknown as http2.ClientHttp2Session,
    call as unknown as ClientCall,
    {
      addressing: { clusterName: "", apiserverAddress: "" },
      dialTimeoutMs: 2000,
      metrics: new AgentMetrics(),
      logger: silentLogger,
      onEndpointCount: () => undefined,
    },
  );
  return { t, call };
}

/** Dial `port` through the tunnel; resolves with the connectID once the endpoint is connected. */
async function dial(t: ServerTunnel, call: CongestedCall, port: number, random: bigint): Promise<bigint> {
  t.receive(
    sealFrame(
      encodePacket(
        { type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: `127.0.0.1:${port}`, random } },
        FRAME_HEADER,
      ),
    ),
  );
  let id = 0n;
  await waitUntil("DIAL_RSP", () =>
    call.packets().some((p) => {
      if ("dialResponse" in p && p.dialResponse.random === random) id = p.dialResponse.connectID;
      return id !== 0n;
    }),
  );
  return id;
}

/** DATA bytes per connection in the frames sent from index `from` on. */
function dataBytes(call: CongestedCall, ids: readonly bigint[], from: number): Map<bigint, number> {
  const m = new Map<bigint, number>(ids.map((id) => [id, 0]));
  for (const p of call.packets().slice(from))
    if ("data" in p) m.set(p.data.connectID, (m.get(p.data.connectID) ?? 0) + p.data.data.length);
  return m;
}

test("busy endpoints share a backed-up server stream round robin, one quantum per turn", async () => {
  const src = await sourceServer();
  const { t, call } = tunnel();
  try {
    const ids: bigint[] = [];
    for (let i = 1; i <= 4; i++) ids.push(await dial(t, call, src.port, BigInt(i)));
    // The first endpoint was alone for a while (no quantum then); once all are busy, turns begin.
    await waitUntil("every endpoint sending", () => [...dataBytes(call, ids, 0).values()].every((b) => b > 0));
    let from = call.sent.length;
    call.emit("drain");
    for (let turn = 0; turn < 6; turn++) {
      // Every endpoint reads until it has sent a quantum, then waits for the next turn.
      await waitUntil(`turn ${turn}: every endpoint sent its quantum`, () =>
        [...dataBytes(call, ids, from).values()].every((b) => b >= ENDPOINT_SEND_QUANTUM),
      );
      await new Promise((r) => setTimeout(r, 50));
      for (const [id, b] of dataBytes(call, ids, from)) {
        assert.ok(b < 2 * ENDPOINT_SEND_QUANTUM, `turn ${turn}: connection ${id} sent ${b} bytes in one turn`);
      }
      from = call.sent.length;
      call.emit("drain");
    }
  } finally {
    t.close("test over");
    src.close();
  }
});

test("a single busy endpoint is not held to a quantum", async () => {
  const src = await sourceServer();
  const { t, call } = tunnel();
  try {
    const id = await dial(t, call, src.port, 1n);
    // No "drain" ever: only the stream budget (not reached: nothing is buffered) could stop it.
    await waitUntil("all 8 MiB", () => (dataBytes(call, [id], 0).get(id) ?? 0) >= 8 * 1024 * 1024);
  } finally {
    t.close("test over");
    src.close();
  }
});
