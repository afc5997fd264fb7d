/**
 * The real gateway in front of the real agent gateway endpoint (issue 43, "zero failed requests"):
 * a request whose endpoint session goes away before its answer is sent again on a new session when
 * that is safe (docs/design/gateway.md, "Retry"), and never when the endpoint may have processed a
 * request that is not safe to repeat. Between the gateway and the endpoint sits a loopback relay
 * standing in for the tunnel, which can cut every connection (an agent replica gone) or leave them
 * looking open and drop them at the gateway's next write (a session the gateway still holds
 * although its agent is gone); behind the endpoint, the stand-in kube-apiserver records what it
 * receives.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as net from "node:net";
import { after, before, describe, test } from "node:test";
import { startGatewayFixture, type GatewayFixture } from "../../packages/agent/src/testing/gateway-fixture.js";
import {
  ALICE_TOKEN as TOKEN,
  startGatewayBeforeEndpoint,
  type GatewayBeforeEndpoint,
  type H2Answer,
} from "../infra/gateway/gateway-before-endpoint.js";

/** A loopback relay to `port` that can cut or silently break every connection it carries. */
class Relay {
  private readonly pairs = new Set<{ down: net.Socket; up: net.Socket; broken: boolean }>();
  private readonly server: net.Server;
  port = 0;

  constructor(private readonly target: number) {
    this.server = net.createServer({ allowHalfOpen: true }, (down) => {
      const up = net.connect(this.target, "127.0.0.1");
      const pair = { down, up, broken: false };
      this.pairs.add(pair);
      const end = (): void => {
        this.pairs.delete(pair);
        down.destroy();
        up.destroy();
      };
      down.on("data", (c: Buffer) => {
        // A broken connection: the gateway's next bytes never arrive, and the gateway learns it then.
        if (pair.broken) end();
        else up.write(c);
      });
      up.on("data", (c: Buffer) => {
        if (!pair.broken) down.write(c);
      });
      down.on("end", () => up.end());
      up.on("end", () => down.end());
      for (const s of [down, up]) {
        s.on("error", end);
        s.on("close", end);
      }
    });
  }

  async start(): Promise<void> {
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Every connection cut at once (an agent replica killed). */
  cutAll(): void {
    for (const p of [...this.pairs]) {
      p.down.destroy();
      p.up.destroy();
    }
  }

  /** Every connection looks open, but is dropped when the gateway next writes to it. */
  breakAll(): void {
    for (const p of this.pairs) p.broken = true;
  }

  get open(): number {
    return this.pairs.size;
  }

  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe("gateway retries across a lost endpoint session", { timeout: 120_000 }, () => {
  let fx: GatewayFixture;
  let relay: Relay;
  let port = 0;
  let healthPort = 0;
  let servingCa = "";
  let gw: GatewayBeforeEndpoint;

  before(async () => {
    fx = await startGatewayFixture();
    relay = new Relay(fx.port);
    await relay.start();
    gw = await startGatewayBeforeEndpoint(fx, relay.port);
    ({ port, healthPort, servingCa } = gw);
  });

  after(async () => {
    await gw.close();
    await relay.close();
    await fx.close();
  });

  /** One HTTP/2 request to the gateway as alice, on its own session. */
  const h2 = (headers: http2.OutgoingHttpHeaders, body?: string): Promise<H2Answer> => gw.h2(headers, body);

  const get = (path: string): Promise<{ status: number; body: string }> =>
    h2({ ":method": "GET", ":path": `/east${path}` });
  const apiserverSaw = (from: number): string[] => fx.apiserver.received.slice(from).map((r) => `${r.method} ${r.url}`);

  async function retries(): Promise<number> {
    const text = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
    let n = 0;
    for (const m of text.matchAll(/^cluster_proxy_gateway_endpoint_retries_total\{[^}]*\} (\d+)/gm)) n += Number(m[1]);
    return n;
  }

  test("the endpoint's session lost between requests: every GET is answered, each reaching the apiserver once", async () => {
    assert.equal((await get("/version")).status, 200);
    const from = fx.apiserver.received.length;
    const retried = await retries();
    for (let i = 0; i < 10; i++) {
      // The gateway still holds the session; the agent behind it is gone.
      if (i % 2 === 0) relay.breakAll();
      else relay.cutAll();
      const r = await get(`/api/v1/namespaces/n${i}`);
      assert.equal(r.status, 200, `request ${i}: ${r.body}`);
    }
    // Many at once across a broken session.
    relay.breakAll();
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => get(`/api/v1/namespaces/c${i}`)));
    assert.deepEqual(
      answers.map((a) => a.status),
      answers.map(() => 200),
      answers.map((a) => a.body).join("\n"),
    );
    const seen = apiserverSaw(from);
    assert.equal(seen.length, 30, seen.join(", "));
    assert.equal(new Set(seen).size, 30, "each request reached the apiserver exactly once");
    assert.ok((await retries()) > retried, "the retries were counted");
  });

  test("a GET in flight when its session is cut is answered (sent again: a safe method)", async () => {
    const from = fx.apiserver.received.length;
    const held = fx.apiserver.nextHeldHead();
    const answer = get("/hold-head/get");
    await held;
    const again = fx.apiserver.nextHeldHead();
    relay.cutAll();
    await again;
    fx.apiserver.releaseHeads();
    const r = await answer;
    assert.equal(r.status, 200, r.body);
    // Safe to repeat, and repeated: the first attempt may have been processed.
    assert.deepEqual(apiserverSaw(from), ["GET /hold-head/get", "GET /hold-head/get"]);
  });

  test("a POST whose body reached the apiserver is not sent again when its session is cut: a clear 502", async () => {
    const from = fx.apiserver.received.length;
    const held = fx.apiserver.nextHeldHead();
    const answer = h2(
      { ":method": "POST", ":path": "/east/hold-head/post", "content-type": "application/json" },
      '{"kind":"ConfigMap"}',
    );
    await held;
    relay.cutAll();
    const r = await answer;
    fx.apiserver.releaseHeads();
    assert.equal(r.status, 502, r.body);
    assert.match(
      r.body,
      /^cluster "east": gateway endpoint error: .*\(not retried: the POST request had reached the agent and may have been processed\)\n$/,
    );
    assert.deepEqual(apiserverSaw(from), ["POST /hold-head/post"], "processed once, never twice");
  });

  test("GOAWAY mid-flight (the agent drains): the running watch finishes, new requests go on a new session", async () => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { ca: servingCa, servername: "localhost" });
    session.on("error", () => undefined);
    try {
      const stream = session.request({ ":path": "/east/stream", authorization: `Bearer ${TOKEN}` });
      stream.end();
      let text = "";
      stream.on("data", (c: Buffer) => (text += c.toString()));
      while (!text.includes("first")) await once(stream, "data");
      fx.endpoint.drain();
      const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => get(`/api/v1/namespaces/d${i}`)));
      assert.deepEqual(
        answers.map((a) => a.status),
        answers.map(() => 200),
      );
      fx.apiserver.releaseStream();
      await once(stream, "end");
      assert.equal(text, "first\nsecond\n");
    } finally {
      session.close();
    }
  });
});
