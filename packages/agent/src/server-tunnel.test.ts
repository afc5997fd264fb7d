/**
 * Per-connection flow control at the agent (docs/flow-control.md): an endpoint that does not
 * read makes the tunnel send FLOW_PAUSE for that connection, never pause the shared server
 * stream (while the server honours FLOW_PAUSE), and close the connection with the stall error
 * after the stall timeout; FLOW_PAUSE from the server pauses that endpoint socket only.
 */
import assert from "node:assert/strict";
import { EventEmitter, once } from "node:events";
import type * as http2 from "node:http2";
import * as net from "node:net";
import { after, describe, test } from "node:test";
import {
  FlowControl,
  PacketType,
  decodeFlowControl,
  decodePacket,
  encodeData,
  encodeFlowControl,
  encodePacket,
  type Packet,
} from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame, silentLogger, type ClientCall } from "@cluster-proxy/tunnel";
import { AgentMetrics } from "./metrics.js";
import { ServerTunnel } from "./server-tunnel.js";

class FakeCall extends EventEmitter {
  readonly sent: Buffer[] = [];
  paused = false;
  pauses = 0;
  bufferedBytes = 0;
  closed = false;
  send(frame: Buffer): boolean {
    this.sent.push(frame);
    return true;
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
  packets(): Packet[] {
    return this.sent
      .filter((f) => !decodeFlowControl(f.subarray(FRAME_HEADER)))
      .map((f) => decodePacket(f.subarray(FRAME_HEADER)));
  }
  flows(): { type: number; connectID: bigint }[] {
    return this.sent.flatMap((f) => decodeFlowControl(f.subarray(FRAME_HEADER)) ?? []);
  }
}

class FakeSession extends EventEmitter {
  destroyed = false;
  destroy(): void {
    this.destroyed = true;
  }
}

const frame = (p: Packet): Buffer => sealFrame(encodePacket(p, FRAME_HEADER));

async function waitUntil(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** An endpoint that accepts and never reads; `sockets` are its accepted sockets. */
async function deafEndpoint(): Promise<{ port: number; sockets: net.Socket[]; close: () => void }> {
  const sockets: net.Socket[] = [];
  const srv = net.createServer({ pauseOnConnect: true }, (s) => {
    s.on("error", () => undefined);
    sockets.push(s);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  return {
    port: (srv.address() as net.AddressInfo).port,
    sockets,
    close: () => {
      for (const s of sockets) s.destroy();
      srv.close();
    },
  };
}

function tunnel(stallMs: number, serverFlowControl = true): { t: ServerTunnel; call: FakeCall } {
  const call = new FakeCall();
  const t = new ServerTunnel(
    "server-1",
    new FakeSession() as unknown as http2.ClientHttp2Session,
    call as unknown as ClientCall,
    {
      addressing: { clusterName: "", apiserverAddress: "" },
      dialTimeoutMs: 2000,
      connectionStallTimeoutMs: stallMs,
      serverFlowControl,
      endpointWriteBudget: 256 * 1024,
      endpointWriteLimit: 1024 * 1024 * 1024,
      metrics: new AgentMetrics(),
      logger: silentLogger,
      onEndpointCount: () => undefined,
    },
  );
  return { t, call };
}

async function dial(t: ServerTunnel, call: FakeCall, port: number, random: bigint): Promise<bigint> {
  t.receive(
    frame({ type: PacketType.DIAL_REQ, dialRequest: { protocol: "tcp", address: `127.0.0.1:${port}`, random } }),
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

describe("ServerTunnel per-connection flow control", () => {
  const cleanups: (() => void)[] = [];
  after(() => cleanups.forEach((c) => c()));

  test("a deaf endpoint: FLOW_PAUSE, the stream is not paused, then CLOSE_RSP with the stall error", async () => {
    const ep = await deafEndpoint();
    cleanups.push(ep.close);
    const { t, call } = tunnel(300);
    cleanups.push(() => t.close("test over"));
    const id = await dial(t, call, ep.port, 1n);
    const chunk = Buffer.alloc(64 * 1024, 7);
    // Enough to fill the kernel buffers and pass the 256 KiB budget.
    for (let i = 0; i < 400 && call.flows().length === 0; i++) {
      t.receive(sealFrame(encodeData(id, chunk, FRAME_HEADER)));
      if (i % 16 === 15) await new Promise((r) => setTimeout(r, 5));
    }
    assert.deepEqual(call.flows(), [{ type: FlowControl.PAUSE, connectID: id }]);
    assert.equal(call.pauses, 0, "the shared stream is never paused for one endpoint");
    await waitUntil("the stall close", () =>
      call.packets().some((p) => "closeResponse" in p && p.closeResponse.connectID === id),
    );
    const rsp = call.packets().find((p) => "closeResponse" in p);
    assert.ok(rsp && "closeResponse" in rsp);
    assert.match(rsp.closeResponse.error, /^connection stalled: the endpoint read nothing for 0\.3s/);
    assert.equal(t.endpointCount, 0);
  });

  test("a server that did not announce flow control (a Go server) never gets a FLOW packet", async () => {
    const ep = await deafEndpoint();
    cleanups.push(ep.close);
    const { t, call } = tunnel(300, false);
    cleanups.push(() => t.close("test over"));
    const id = await dial(t, call, ep.port, 1n);
    const chunk = Buffer.alloc(64 * 1024, 7);
    for (let i = 0; i < 400; i++) {
      t.receive(sealFrame(encodeData(id, chunk, FRAME_HEADER)));
      if (i % 16 === 15) await new Promise((r) => setTimeout(r, 5));
    }
    await waitUntil("the stall close", () =>
      call.packets().some((p) => "closeResponse" in p && p.closeResponse.connectID === id),
    );
    assert.deepEqual(call.flows(), [], "only konnectivity packets go to a server that did not announce flow control");
  });

  test("FLOW_PAUSE from the server pauses reading that endpoint only; FLOW_RESUME resumes it", async () => {
    const talkers: net.Socket[] = [];
    const srv = net.createServer((s) => {
      talkers.push(s);
      s.on("error", () => undefined);
      const timer = setInterval(() => s.write("x"), 10);
      s.on("close", () => clearInterval(timer));
    });
    srv.listen(0, "127.0.0.1");
    await once(srv, "listening");
    cleanups.push(() => {
      for (const s of talkers) s.destroy();
      srv.close();
    });
    const port = (srv.address() as net.AddressInfo).port;
    const { t, call } = tunnel(0);
    cleanups.push(() => t.close("test over"));
    const a = await dial(t, call, port, 1n);
    const b = await dial(t, call, port, 2n);
    const dataFor = (id: bigint): number => call.packets().filter((p) => "data" in p && p.data.connectID === id).length;
    t.receive(sealFrame(encodeFlowControl(FlowControl.PAUSE, a, FRAME_HEADER)));
    await new Promise((r) => setTimeout(r, 60));
    const aPaused = dataFor(a);
    const bBefore = dataFor(b);
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(dataFor(a), aPaused, "no DATA from the paused endpoint");
    assert.ok(dataFor(b) > bBefore, "the neighbour keeps flowing");
    t.receive(sealFrame(encodeFlowControl(FlowControl.RESUME, a, FRAME_HEADER)));
    await waitUntil("DATA again after FLOW_RESUME", () => dataFor(a) > aPaused);
  });
});
