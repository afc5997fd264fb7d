import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { after, describe, test } from "node:test";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { IDLE_METRICS_SOURCE, ServerMetrics } from "../metrics.js";
import type { PayloadEnd, PayloadRelay } from "../routing/payload-relay.js";
import { CONNECT_ESTABLISHED } from "./connect-request.js";
import { ConnectDoorClient } from "./http-connect.js";

/** A relay that records what the door hands it; connections and dials are plain numbers. */
class FakeRelay implements PayloadRelay<number, number> {
  readonly clock = new ManualClock();
  readonly dials: { end: PayloadEnd<number>; address: string }[] = [];
  readonly sent: string[] = [];
  readonly closed: number[] = [];
  readonly cancelled: number[] = [];
  dial(end: PayloadEnd<number>, address: string): number {
    this.dials.push({ end, address });
    return this.dials.length;
  }
  cancelDial(dial: number): void {
    this.cancelled.push(dial);
  }
  send(_conn: number, payload: Uint8Array): boolean {
    this.sent.push(Buffer.from(payload).toString());
    return true;
  }
  whenAgentDrained(): void {}
  readerDrained(): void {}
  frontendClosed(conn: number): void {
    this.closed.push(conn);
  }
}

/** A loopback CONNECT door on `relay`; returns a connected client and what it has read. */
async function door(
  relay: FakeRelay,
  headTimeoutMs?: number,
): Promise<{ client: net.Socket; read: () => string; ended: () => boolean; served: () => net.Socket | undefined }> {
  const metrics = new ServerMetrics(IDLE_METRICS_SOURCE);
  let served: net.Socket | undefined;
  const server = net.createServer((socket) => {
    served = socket;
    new ConnectDoorClient(socket, relay, metrics, silentLogger, { headTimeoutMs });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  // Half-open: the client keeps its side open after the door's answer, as a client that never
  // closes does.
  const client = net.connect({
    port: (server.address() as net.AddressInfo).port,
    host: "127.0.0.1",
    allowHalfOpen: true,
  });
  await once(client, "connect");
  let text = "";
  let ended = false;
  client.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")));
  client.on("end", () => (ended = true));
  client.on("error", () => undefined);
  after(() => {
    client.destroy();
    server.close();
  });
  return { client, read: () => text, ended: () => ended, served: () => served };
}

describe("the HTTP CONNECT door", () => {
  test("hands the relay the address and payload bytes, and writes the agent's payload back", async () => {
    const relay = new FakeRelay();
    const { client, read } = await door(relay);
    client.write("CONNECT east:80 HTTP/1.1\r\nHost: east:80\r\n\r\nhello");
    await waitUntil("the door dials", () => relay.dials.length === 1);
    const { end, address } = relay.dials[0]!;
    assert.equal(address, "east:80");
    end.dialSucceeded(7);
    await waitUntil("the client has the 200", () => read().length >= CONNECT_ESTABLISHED.length);
    assert.equal(read(), CONNECT_ESTABLISHED.toString("latin1"));
    assert.deepEqual(relay.sent, ["hello"], "the pipelined bytes go to the relay as they are");
    end.data(7, Buffer.from("world"));
    await waitUntil("the client reads the agent's payload", () => read().endsWith("world"));
    client.write("more");
    await waitUntil("the relay gets the client's bytes", () => relay.sent.length === 2);
    assert.equal(relay.sent[1], "more");
    client.end();
    await waitUntil("the relay is told the client left", () => relay.closed.includes(7));
  });

  test("a client that gives up while its dial is pending (EOF): the dial is cancelled at once, a late success closed", async () => {
    const relay = new FakeRelay();
    const { client, served } = await door(relay);
    client.write("CONNECT east:80 HTTP/1.1\r\n\r\nfirst");
    await waitUntil("the door dials", () => relay.dials.length === 1);
    client.write("second");
    client.end();
    await waitUntil("the dial is cancelled", () => relay.cancelled.includes(1));
    await waitUntil("the socket is gone", () => served()?.destroyed === true);
    relay.dials[0]!.end.dialSucceeded(3);
    assert.deepEqual(relay.sent, [], "nothing sent for a client that left");
    assert.deepEqual(relay.closed, [3], "a late success is closed at once");
  });

  test("the request head deadline and the reject linger run on the relay's clock", async () => {
    const relay = new FakeRelay();
    const { client, read, ended, served } = await door(relay, 1_000);
    client.write("CONNECT east:80 HTTP/1.1\r\n");
    await waitUntil("the door has the socket", () => served() !== undefined);
    relay.clock.advance(999);
    assert.equal(read(), "");
    relay.clock.advance(1);
    await waitUntil("the client has the 408", () => read().startsWith("HTTP/1.1 408 Request Timeout\r\n"));
    await waitUntil("the door ends its side", ended);
    assert.equal(served()?.destroyed, false, "the client may read the answer and close");
    relay.clock.advance(5_000);
    assert.equal(served()?.destroyed, true, "then the socket is destroyed");
    assert.deepEqual(relay.dials, []);
  });
});
