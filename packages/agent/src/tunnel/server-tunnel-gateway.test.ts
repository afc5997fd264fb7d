/**
 * The reserved gateway address at the tunnel: never dialled (no connector call, so no destination
 * policy), refused with a clear text when the endpoint is disabled, else served in-process over a
 * stream with the same per-connection flow control as a dialled socket.
 */
import assert from "node:assert/strict";
import type { Duplex } from "node:stream";
import { describe, test } from "node:test";
import { PacketType, encodeData, encodePacket } from "@cluster-proxy/protocol";
import { FRAME_HEADER, sealFrame } from "@cluster-proxy/tunnel";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { GATEWAY_ENDPOINT_DISABLED } from "@cluster-proxy/api";
import type { InProcessEndpoint } from "./server-tunnel.js";
import { FakeServerCall, dialAddress, tunnelOver } from "../testing/fake-server-call.js";

/** A connector that must not be used. */
const noDial = (): never => {
  throw new Error("the reserved address must not be dialled");
};

function dataFrom(call: FakeServerCall, id: bigint): string {
  return call
    .packets()
    .flatMap((p) => ("data" in p && p.data.connectID === id ? [Buffer.from(p.data.data).toString("utf8")] : []))
    .join("");
}

describe("ServerTunnel and the reserved gateway address", () => {
  test("disabled: DIAL_RSP with the clear error, for any port and case, and nothing is dialled", async () => {
    const call = new FakeServerCall();
    const t = tunnelOver(call, { connect: noDial });
    try {
      for (const [i, address] of [
        "gateway.cluster-proxy.invalid:443",
        "GATEWAY.Cluster-Proxy.Invalid:8443",
      ].entries()) {
        const rsp = await dialAddress(t, call, address, BigInt(i + 1));
        assert.equal(rsp.connectID, 0n);
        assert.equal(rsp.error, GATEWAY_ENDPOINT_DISABLED);
      }
      assert.equal(t.endpointCount, 0);
    } finally {
      t.close("test over");
    }
  });

  test("enabled: the connection is served in-process, both ways, and CLOSE_REQ ends the stream", async () => {
    const streams: Duplex[] = [];
    const gateway: InProcessEndpoint = {
      accept: (stream) => {
        streams.push(stream);
        stream.on("data", (chunk: Buffer) => stream.write(`echo:${chunk.toString("utf8")}`));
      },
    };
    const call = new FakeServerCall();
    const t = tunnelOver(call, { connect: noDial, gateway });
    try {
      const rsp = await dialAddress(t, call, "gateway.cluster-proxy.invalid:443", 1n);
      assert.equal(rsp.error, "");
      assert.notEqual(rsp.connectID, 0n);
      assert.equal(streams.length, 1);
      t.receive(sealFrame(encodeData(rsp.connectID, Buffer.from("ping"), FRAME_HEADER)));
      await waitUntil("the echo", () => dataFrom(call, rsp.connectID) === "echo:ping", { timeoutMs: 5_000 });
      const stream = streams[0];
      assert.ok(stream);
      const ended = new Promise<void>((resolve) => stream.once("close", () => resolve()));
      t.receive(
        sealFrame(
          encodePacket({ type: PacketType.CLOSE_REQ, closeRequest: { connectID: rsp.connectID } }, FRAME_HEADER),
        ),
      );
      await ended;
      assert.equal(t.endpointCount, 0);
    } finally {
      t.close("test over");
    }
  });

  test("an in-process endpoint that reads nothing gets FLOW_PAUSE like a dialled socket", async () => {
    const gateway: InProcessEndpoint = { accept: () => undefined };
    const call = new FakeServerCall();
    const t = tunnelOver(call, {
      connect: noDial,
      gateway,
      serverFlowControl: true,
      endpointWriteBudget: 256 * 1024,
      endpointWriteLimit: 1024 * 1024 * 1024,
      connectionStallTimeoutMs: 0,
    });
    try {
      const { connectID } = await dialAddress(t, call, "gateway.cluster-proxy.invalid:443", 1n);
      const chunk = Buffer.alloc(64 * 1024, 1);
      for (let i = 0; i < 8; i++) t.receive(sealFrame(encodeData(connectID, chunk, FRAME_HEADER)));
      assert.deepEqual(
        call.flows().map((f) => f.connectID),
        [connectID],
      );
      assert.equal(call.pauses, 0, "the shared stream is not paused");
    } finally {
      t.close("test over");
    }
  });
});
