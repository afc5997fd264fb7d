/**
 * The dial caps (`--max-dials-per-tunnel`, `--max-dials`): a DIAL_REQ beyond a cap is answered at
 * once with a DIAL_RSP error naming the flag, counted, and opens no socket; a closed connection
 * frees its place.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { PacketType, encodePacket, type Packet } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import { InFlight } from "@cluster-proxy/kit";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { AgentMetrics } from "../metrics.js";
import { dialLimitError } from "../tunnel/server-tunnel.js";
import { FakeServerCall, dialThrough, tunnelOver } from "../testing/fake-server-call.js";
import { listenTcp } from "../testing/tcp-endpoints.js";

const frame = (packet: Packet): Buffer => sealFrame(encodePacket(packet, FRAME_HEADER));

function dialResponse(call: FakeServerCall, random: bigint): { connectID: bigint; error: string } | undefined {
  for (const p of call.packets()) if ("dialResponse" in p && p.dialResponse.random === random) return p.dialResponse;
  return undefined;
}

describe("dial caps", () => {
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  test("the per-tunnel cap refuses the next dial with an error naming --max-dials-per-tunnel", async () => {
    const ep = await listenTcp(() => undefined);
    cleanups.push(() => ep.close());
    const call = new FakeServerCall();
    const metrics = new AgentMetrics();
    const endpoints = new InFlight();
    const t = tunnelOver(call, {
      metrics,
      beginEndpoint: () => endpoints.begin(),
      dialLimits: { perTunnel: 2, perAgent: 0, agentCount: () => endpoints.count },
    });
    cleanups.push(() => t.close("test over"));
    const a = await dialThrough(t, call, ep.port, 1n);
    await dialThrough(t, call, ep.port, 2n);
    t.receive(
      frame({
        type: PacketType.DIAL_REQ,
        dialRequest: { protocol: "tcp", address: `127.0.0.1:${ep.port}`, random: 3n },
      }),
    );
    assert.deepEqual(dialResponse(call, 3n), {
      random: 3n,
      connectID: 0n,
      error: `dial to 127.0.0.1:${ep.port} refused: the agent already holds 2 endpoint connections through this proxy server's tunnel (--max-dials-per-tunnel=2)`,
    });
    assert.equal(t.endpointCount, 2, "the refused dial opened nothing");
    const text = await metrics.registry.metrics();
    assert.match(text, /cluster_proxy_agent_dial_limit_refusals_total\{flag="--max-dials-per-tunnel"\} 1/);
    assert.match(text, /konnectivity_network_proxy_agent_endpoint_dial_failure_total\{reason="limit"\} 1/);
    // closing one connection frees a place
    t.receive(frame({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: a } }));
    await waitUntil("the close", () => t.endpointCount === 1, { timeoutMs: 10_000 });
    const again = await dialThrough(t, call, ep.port, 4n);
    assert.notEqual(again, 0n);
  });

  test("the per-agent cap counts every tunnel's connections", async () => {
    const ep = await listenTcp(() => undefined);
    cleanups.push(() => ep.close());
    const endpoints = new InFlight();
    const limits = { perTunnel: 0, perAgent: 1, agentCount: () => endpoints.count };
    const callA = new FakeServerCall();
    const callB = new FakeServerCall();
    const a = tunnelOver(callA, { beginEndpoint: () => endpoints.begin(), dialLimits: limits });
    const b = tunnelOver(callB, { beginEndpoint: () => endpoints.begin(), dialLimits: limits });
    cleanups.push(
      () => a.close("test over"),
      () => b.close("test over"),
    );
    await dialThrough(a, callA, ep.port, 1n);
    b.receive(
      frame({
        type: PacketType.DIAL_REQ,
        dialRequest: { protocol: "tcp", address: `127.0.0.1:${ep.port}`, random: 2n },
      }),
    );
    assert.equal(dialResponse(callB, 2n)?.error, dialLimitError(`127.0.0.1:${ep.port}`, "--max-dials", 1));
    assert.match(dialLimitError("x:1", "--max-dials", 1), /holds 1 endpoint connections \(--max-dials=1\)$/);
  });
});
