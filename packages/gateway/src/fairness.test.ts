/**
 * Fairness at a running gateway (fake hub, fake agent endpoint, the queues' deadlines on a manual
 * clock): one user holding 256 slow requests to a cluster does not delay another user's `get`,
 * and its requests beyond its cap and queue are answered 429 with Retry-After without reaching the
 * cluster; a flood of made-up bearer tokens from one address costs at most the bucket's hub
 * TokenReviews while a good user's cached token keeps working without a new review.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { startGatewayFixture, type GatewayFixture, type TestResponse } from "./testing/gateway-fixture.js";

const GREEDY = "greedy-token";
const POLITE = "polite-token";

/** An HTTP/2 session to the gateway; `get` sends one request on it and reads the whole answer. */
function h2(f: GatewayFixture): { get(path: string, token: string): Promise<TestResponse>; close(): void } {
  const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
  session.on("error", () => undefined);
  return {
    get: (path, token) =>
      new Promise((resolve, reject) => {
        const stream = session.request({ ":path": path, authorization: `Bearer ${token}` });
        let head: http2.IncomingHttpHeaders = {};
        const chunks: Buffer[] = [];
        stream.on("response", (h) => (head = h));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () =>
          resolve({ status: Number(head[":status"]), headers: head, body: Buffer.concat(chunks).toString() }),
        );
        stream.on("error", reject);
        stream.end();
      }),
    close: () => session.close(),
  };
}

async function metric(f: GatewayFixture, reason: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${f.healthPort}/metrics`);
  const m = new RegExp(`^cluster_proxy_gateway_fairness_rejections_total\\{reason="${reason}"\\} (\\d+)$`, "m").exec(
    await r.text(),
  );
  return m ? Number(m[1]) : 0;
}

describe("per-user caps of one cluster", () => {
  let f: GatewayFixture;
  const clock = new ManualClock();
  before(async () => {
    // The defaults: 64 in flight per user and cluster, 256 waiting, 15 s in the queue.
    f = await startGatewayFixture({ clock });
    f.hub.tokens.set(GREEDY, { username: "greedy", groups: [], extra: {} });
    f.hub.tokens.set(POLITE, { username: "polite", groups: [], extra: {} });
    f.hub.grantProxy("greedy", "mc1", "get");
    f.hub.grantProxy("polite", "mc1", "get");
  });
  after(() => f.close());

  test("one user holding 256 slow requests does not delay another's get; its extra requests get 429 after the queue deadline", async () => {
    // Four connections of 64 streams each (a server may cap the streams of one connection).
    const sessions = [h2(f), h2(f), h2(f), h2(f)];
    try {
      const greedy = sessions.flatMap((s) => Array.from({ length: 64 }, () => s.get("/mc1/hold", GREEDY)));
      await f.endpoint.heldCount(64);
      await waitUntil(
        "192 of the greedy user's requests to wait in its queue",
        () => f.gateway.caps.counts.queued === 192,
        {
          timeoutMs: 30_000,
          everyMs: 20,
        },
      );
      assert.equal(f.endpoint.held.length, 64, "the cap: 64 reached the cluster");

      const start = Date.now();
      const polite = await f.request("/mc1/api/v1/namespaces", { headers: { authorization: `Bearer ${POLITE}` } });
      const took = Date.now() - start;
      assert.equal(polite.status, 200);
      assert.ok(took < 1_000, `another user's get took ${took} ms`);

      clock.advance(15_000);
      let timer: NodeJS.Timeout | undefined;
      const answers = await Promise.race([
        Promise.all(greedy.slice(64)),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("no 429 after the deadline")), 20_000);
        }),
      ]).finally(() => clearTimeout(timer));
      const refused = answers.filter((a) => a.status === 429);
      assert.equal(refused.length, 192, `statuses: ${JSON.stringify(answers.map((a) => a.status))}`);
      for (const r of refused) {
        assert.equal(r.headers["retry-after"], "1");
        assert.match(r.body, /^too many requests of one caller to cluster "mc1": .*--max-requests-per-user.*\n$/);
      }
      assert.equal(f.endpoint.held.length, 64, "nothing of the refused requests reached the cluster");
      assert.equal(await metric(f, "queue-timeout"), 192);

      f.endpoint.release();
      const done = await Promise.all(greedy.slice(0, 64));
      assert.ok(done.every((a) => a.status === 200));
      await waitUntil("every place to be free", () => f.gateway.caps.counts.requests === 0);
    } finally {
      for (const s of sessions) s.close();
    }
  });

  test("a full queue is refused at once, while the user's watches still get in", async () => {
    const sessions = Array.from({ length: 6 }, () => h2(f));
    try {
      const held = sessions.slice(0, 5).flatMap((s) => Array.from({ length: 64 }, () => s.get("/mc1/hold", GREEDY)));
      await f.endpoint.heldCount(64);
      await waitUntil("a full queue", () => f.gateway.caps.counts.queued === 256, { timeoutMs: 30_000, everyMs: 20 });
      const over = await sessions[5]!.get("/mc1/api", GREEDY);
      assert.equal(over.status, 429);
      assert.equal(over.headers["retry-after"], "1");
      assert.match(over.body, /64 in flight and 256 waiting/);
      const watch = sessions[5]!.get("/mc1/quiet?watch=true", GREEDY);
      await f.endpoint.heldCount(65);
      clock.advance(15_000);
      f.endpoint.release();
      assert.equal((await watch).status, 200);
      const statuses = (await Promise.all(held)).map((a) => a.status);
      assert.deepEqual([statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length], [64, 256]);
    } finally {
      for (const s of sessions) s.close();
    }
  });

  test("a request whose caller leaves while it waits gives its place up and never reaches the cluster", async () => {
    const sessions = [h2(f), h2(f)];
    const leaving = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    leaving.on("error", () => undefined);
    try {
      const held = sessions.flatMap((s) => Array.from({ length: 32 }, () => s.get("/mc1/hold", GREEDY)));
      await f.endpoint.heldCount(64);
      const stream = leaving.request({ ":path": "/mc1/hold", authorization: `Bearer ${GREEDY}` });
      stream.on("error", () => undefined);
      stream.end();
      await waitUntil("one request queued", () => f.gateway.caps.counts.queued === 1);
      stream.close(http2.constants.NGHTTP2_CANCEL);
      await waitUntil("the queue to be empty", () => f.gateway.caps.counts.queued === 0);
      f.endpoint.release();
      assert.ok((await Promise.all(held)).every((a) => a.status === 200));
      await waitUntil("every place free", () => f.gateway.caps.counts.requests === 0);
      assert.equal(f.endpoint.held.length, 0, "the request that left was never sent");
      assert.equal((await f.request("/mc1/api", { headers: { authorization: `Bearer ${POLITE}` } })).status, 200);
    } finally {
      leaving.close();
      for (const s of sessions) s.close();
    }
  });
});

describe("long-running requests of one user", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({ options: { maxLongRunningPerUser: 2 } });
    f.hub.tokens.set(GREEDY, { username: "greedy", groups: [], extra: {} });
    f.hub.grantProxy("greedy", "mc1", "get", "create");
  });
  after(() => f.close());

  test("watches and upgrades share their own cap: over it 429 with Retry-After at once, while gets go on", async () => {
    const client = h2(f);
    const exec = await f.tlsConnect();
    try {
      const watch = client.get("/mc1/quiet?watch=true", GREEDY);
      await f.endpoint.heldCount(1);
      exec.write(
        `GET /mc1/api/v1/namespaces/a/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GREEDY}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n`,
      );
      let got = "";
      exec.on("data", (c: Buffer) => (got += c.toString()));
      await waitUntil("the exec to be switched", () => got.startsWith("HTTP/1.1 101"));
      await waitUntil("two long-running places taken", () => f.gateway.caps.counts.longRunning === 2);

      const third = await f.tlsConnect();
      third.write(
        `GET /mc1/api/v1/namespaces/a/pods/p/attach HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GREEDY}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
      );
      let refused = "";
      third.on("data", (c: Buffer) => (refused += c.toString()));
      await once(third, "end");
      assert.match(refused, /^HTTP\/1.1 429 Too Many Requests\r\n/);
      assert.match(refused, /\r\nRetry-After: 1\r\n/);
      assert.match(refused, /\(--max-long-running-per-user\)\n$/);
      const followed = await client.get("/mc1/api/v1/namespaces/a/pods/p/log?follow=true", GREEDY);
      assert.equal(followed.status, 429);
      assert.equal(followed.headers["retry-after"], "1");
      assert.equal((await client.get("/mc1/api/v1/pods", GREEDY)).status, 200, "a get goes on");

      exec.end();
      await once(exec, "end");
      await waitUntil("the exec's place to be free", () => f.gateway.caps.counts.longRunning === 1);
      f.endpoint.release();
      assert.equal((await watch).status, 200);
    } finally {
      exec.destroy();
      client.close();
    }
  });
});

describe("a flood of made-up bearer tokens", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({ options: { tokenReviewRatePerSource: 1, tokenReviewBurstPerSource: 20 } });
    f.hub.tokens.set(POLITE, { username: "polite", groups: [], extra: {} });
    f.hub.grantProxy("polite", "mc1", "get");
  });
  after(() => f.close());

  test("costs at most the bucket's TokenReviews; a good user's cached token keeps working without a review", async () => {
    const client = h2(f);
    try {
      assert.equal((await client.get("/mc1/api", POLITE)).status, 200);
      const reviewsBefore = f.hub.reviews.length;
      const start = Date.now();
      const flood = await Promise.all(Array.from({ length: 300 }, (_, i) => client.get("/mc1/api", `junk-${i}`)));
      // The bucket: a burst of 20, and one more per second the flood took.
      const bound = 20 + Math.ceil((Date.now() - start) / 1000);
      const reviews = f.hub.reviews.length - reviewsBefore;
      assert.ok(reviews <= bound, `${reviews} TokenReviews for 300 made-up tokens (at most ${bound})`);
      const limited = flood.filter((a) => a.status === 429);
      assert.ok(limited.length >= 300 - bound, `429s: ${limited.length}`);
      assert.equal(flood.length - limited.length, flood.filter((a) => a.status === 401).length);
      assert.ok(Number(limited[0]!.headers["retry-after"]) >= 1);
      assert.match(limited[0]!.body, /too many new bearer tokens from this address.*--token-review-rate-per-source/);
      assert.equal(await metric(f, "token-review-rate"), limited.length);

      assert.equal((await client.get("/mc1/api", POLITE)).status, 200);
      assert.equal(f.hub.reviews.length - reviewsBefore, reviews, "the good token was still cached");
      assert.equal(f.endpoint.dialed.length > 0, true);
    } finally {
      client.close();
    }
  });
});
