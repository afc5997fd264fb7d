/**
 * HTTP/2 to the kube-apiserver (gateway-h2-upstream.ts) through the endpoint: with a stand-in
 * that offers `h2`, requests share one session, watches stream and are cancelled upstream,
 * bodies and identities arrive as over HTTP/1.1, the stream limit opens a second session,
 * GOAWAY and idleness end sessions; with an HTTP/1.1-only stand-in everything goes HTTP/1.1;
 * upgrades always do.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { headerPairs, headerValues } from "./gateway-request.js";
import {
  callerSession,
  h2Call,
  startGatewayFixture,
  type GatewayFixture,
  type ReceivedRequest,
} from "../testing/gateway-fixture.js";

const ID: [string, string][] = [
  ["Cluster-Proxy-Target", "kube"],
  ["Impersonate-User", "cluster:hub:alice"],
];

const ALICE = "cluster:hub:alice";

const WAIT = { timeoutMs: 15_000, everyMs: 10 };

/** One request to the endpoint over a fresh mutual-TLS HTTP/2 session. */
function call(
  fx: GatewayFixture,
  c: { path?: string; method?: string; headers?: [string, string][]; body?: string | Buffer },
): Promise<{ status: number; body: string }> {
  return h2Call(fx.port, {
    path: c.path ?? "/api/v1/namespaces/default/pods",
    method: c.method ?? "GET",
    headers: c.headers ?? ID,
    ...(c.body !== undefined ? { body: c.body } : {}),
    client: fx.gatewayClient,
    ca: fx.agentCa,
  });
}

/** The whole answer to a kube request for `path` as alice on `session`, once its stream ended. */
async function answerText(session: http2.ClientHttp2Session, path: string): Promise<string> {
  const answer = session.request({ ":path": path, "cluster-proxy-target": "kube", "impersonate-user": ALICE });
  answer.setEncoding("utf8");
  let text = "";
  answer.on("data", (c: string) => (text += c));
  await once(answer, "end");
  return text;
}

/** The headers a request arrived with, names lowercased, without the per-protocol ones. */
function comparable(r: ReceivedRequest | undefined): string[] {
  const out: string[] = [];
  for (const [name, value] of headerPairs(r?.rawHeaders ?? []))
    if (!["connection", "content-length", "transfer-encoding"].includes(name.toLowerCase()))
      out.push(`${name.toLowerCase()}: ${value}`);
  return out.sort();
}

/** An upgrade through the endpoint; resolves with the head of its answer. */
async function upgrade(fx: GatewayFixture): Promise<string> {
  const socket = tls.connect({
    host: "127.0.0.1",
    port: fx.port,
    ca: fx.agentCa,
    ...fx.gatewayClient,
    checkServerIdentity: () => undefined,
  });
  let received = "";
  try {
    socket.write(
      "POST /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: gateway\r\nConnection: Upgrade\r\n" +
        "Upgrade: SPDY/3.1\r\nCluster-Proxy-Target: kube\r\nImpersonate-User: cluster:hub:alice\r\n\r\n",
    );
    await new Promise<void>((resolve, reject) => {
      socket.on("data", (chunk: Buffer) => {
        received += chunk.toString("latin1");
        if (received.includes("\r\n\r\n")) resolve();
      });
      socket.on("error", reject);
    });
    return received;
  } finally {
    socket.destroy();
  }
}

describe("the endpoint -> kube-apiserver leg over HTTP/2", () => {
  let fx: GatewayFixture;
  before(async () => {
    fx = await startGatewayFixture({ apiserverHttp2: true });
  });
  after(async () => {
    await fx.close();
  });

  test("requests, concurrent and one after another, are streams of one HTTP/2 session", async () => {
    const answers = await Promise.all([0, 1, 2, 3, 4].map((i) => call(fx, { path: `/api/v1/namespaces/n${i}/pods` })));
    for (const a of answers) assert.equal(a.status, 200);
    for (let i = 0; i < 3; i += 1) assert.equal((await call(fx, {})).status, 200);
    assert.equal(fx.apiserver.connections(), 1);
    assert.deepEqual(
      fx.apiserver.received.map((r) => r.httpVersion),
      Array.from({ length: 8 }, () => "2.0"),
    );
  });

  test("a body with content-length arrives intact, with that length; a streamed body arrives without chunked coding", async () => {
    const big = Buffer.alloc(300 * 1024, "abcdefgh");
    const post = await call(fx, {
      method: "POST",
      headers: [...ID, ["Content-Length", String(big.length)], ["Content-Type", "text/plain"]],
      body: big,
    });
    assert.equal(post.status, 200);
    const got = fx.apiserver.received.at(-1);
    assert.equal(got?.httpVersion, "2.0");
    assert.equal(got?.body, big.toString("utf8"));
    assert.deepEqual(headerValues(got?.rawHeaders ?? [], "content-length"), [String(big.length)]);
    assert.equal((await call(fx, { method: "PATCH", body: '{"a":1}' })).status, 200);
    const streamed = fx.apiserver.received.at(-1);
    assert.equal(streamed?.body, '{"a":1}');
    assert.deepEqual(headerValues(streamed?.rawHeaders ?? [], "transfer-encoding"), []);
    assert.deepEqual(headerValues(streamed?.rawHeaders ?? [], "content-length"), []);
    assert.equal(fx.apiserver.connections(), 1);
  });

  test("an answer HTTP/2 cannot carry upstream is a 502; the session serves on", async () => {
    const odd = await call(fx, { path: "/status-600" });
    assert.equal(odd.status, 502);
    assert.equal((await call(fx, {})).status, 200);
    assert.equal(fx.apiserver.connections(), 1);
  });

  test("upgrades still go over HTTP/1.1, on a connection of their own", async () => {
    const before = fx.apiserver.connections();
    const head = await upgrade(fx);
    assert.match(head, /^HTTP\/1\.1 101 /);
    const got = fx.apiserver.received.at(-1);
    assert.equal(got?.httpVersion, "1.1");
    assert.deepEqual(headerValues(got?.rawHeaders ?? [], "upgrade"), ["SPDY/3.1"]);
    assert.equal(fx.apiserver.connections(), before + 1);
  });

  test("after GOAWAY a new session is opened; the running stream finishes on the old one", async () => {
    const before = fx.apiserver.connections();
    const session = await callerSession(fx);
    try {
      const held = session.request({ ":path": "/stream", "cluster-proxy-target": "kube", "impersonate-user": ALICE });
      held.setEncoding("utf8");
      let text = "";
      held.on("data", (c: string) => (text += c));
      await waitUntil("the watch's first event", () => text === "first\n", WAIT);
      fx.apiserver.goAway();
      await waitUntil("the gateway endpoint sees the GOAWAY", async () => (await call(fx, {})).status === 200, WAIT);
      assert.equal(fx.apiserver.connections(), before + 1);
      fx.apiserver.releaseStream();
      await once(held, "end");
      assert.equal(text, "first\nsecond\n");
    } finally {
      session.destroy();
    }
  });
});

describe("watches over HTTP/2 to the kube-apiserver", () => {
  let fx: GatewayFixture;
  before(async () => {
    fx = await startGatewayFixture({ apiserverHttp2: true });
  });
  after(async () => {
    await fx.close();
  });

  test("a watch streams chunk by chunk and is reset upstream when its caller goes away", async () => {
    const session = await callerSession(fx);
    try {
      const watch = session.request({
        ":path": "/stream",
        "cluster-proxy-target": "kube",
        "impersonate-user": ALICE,
      });
      watch.on("error", () => undefined);
      watch.setEncoding("utf8");
      let text = "";
      watch.on("data", (c: string) => (text += c));
      // The first event arrives while the stand-in holds the rest.
      await waitUntil("the watch's first event", () => text === "first\n", WAIT);
      assert.equal(fx.apiserver.resets(), 0);
      watch.close(http2.constants.NGHTTP2_CANCEL);
      await waitUntil("the upstream stream reset", () => fx.apiserver.resets() === 1, WAIT);
      // The session to the apiserver stays and serves on.
      assert.equal((await call(fx, {})).status, 200);
      assert.equal(fx.apiserver.connections(), 1);
    } finally {
      session.destroy();
    }
  });

  test("answers of a declared length whose END_STREAM comes a frame later are never reset upstream", async () => {
    // A reset per answer would trip the rapid-reset guard of nghttp2-based servers (about 1,000
    // resets close the session with INTERNAL_ERROR and fail every request on it).
    const session = await callerSession(fx);
    const resets = fx.apiserver.resets();
    try {
      for (let round = 0; round < 50; round++) {
        const texts = await Promise.all(Array.from({ length: 8 }, () => answerText(session, "/sized")));
        assert.deepEqual(texts, Array(8).fill("sized\n"));
      }
      assert.equal(fx.apiserver.resets(), resets, "no upstream stream of a whole answer was reset");
    } finally {
      session.destroy();
    }
  });

  test("an answer of a declared length ends with its last byte, before the apiserver ends its stream, which is reset if held", async () => {
    const session = await callerSession(fx);
    try {
      const resets = fx.apiserver.resets();
      // The stand-in holds its END_STREAM until released: the caller's stream ends without it.
      assert.equal(await answerText(session, "/whole-then-hold"), "whole\n");
      // The caller's stream is done, so the one the apiserver still holds is reset (after a grace), not left open.
      await waitUntil("the held upstream stream reset", () => fx.apiserver.resets() === resets + 1);
      fx.apiserver.releaseStream();
      assert.equal((await call(fx, {})).status, 200);
    } finally {
      session.destroy();
    }
  });
});

describe("the apiserver's stream limit and idle sessions", () => {
  let fx: GatewayFixture;
  before(async () => {
    fx = await startGatewayFixture({ apiserverHttp2: true, apiserverMaxStreams: 2, upstreamIdleMs: 300 });
  });
  after(async () => {
    await fx.close();
  });

  test("more streams than the apiserver allows on a session open a second session; all are served", async () => {
    const session = await callerSession(fx);
    try {
      const watches = [0, 1, 2].map(() => {
        const s = session.request({ ":path": "/stream", "cluster-proxy-target": "kube", "impersonate-user": ALICE });
        s.on("error", () => undefined);
        s.resume();
        return s;
      });
      await Promise.all(watches.map((s) => once(s, "response")));
      assert.equal(fx.apiserver.connections(), 2);
      fx.apiserver.releaseStream();
      await Promise.all(watches.map((s) => once(s, "end")));
    } finally {
      session.destroy();
    }
  });

  test("sessions without streams are closed after the idle time", async () => {
    await waitUntil("the idle sessions closed", () => fx.apiserver.openConnections() === 0, WAIT);
    assert.equal((await call(fx, {})).status, 200);
    assert.equal(fx.apiserver.openConnections(), 1);
  });
});

describe("an apiserver that allows no stream", () => {
  let fx: GatewayFixture;
  before(async () => {
    fx = await startGatewayFixture({ apiserverHttp2: true, apiserverMaxStreams: 0 });
  });
  after(async () => {
    await fx.close();
  });

  test("a request is a 502 after a bounded number of sessions, which are all closed", async () => {
    const answer = await call(fx, {});
    assert.equal(answer.status, 502);
    assert.match(answer.body, /no HTTP\/2 session/);
    assert.ok(fx.apiserver.connections() <= 4, `${fx.apiserver.connections()} connections`);
    await waitUntil("the useless sessions closed", () => fx.apiserver.openConnections() === 0, WAIT);
    assert.equal(fx.apiserver.received.length, 0);
  });
});

describe("identities over HTTP/2 and HTTP/1.1", () => {
  let h1: GatewayFixture;
  let h2: GatewayFixture;
  before(async () => {
    h1 = await startGatewayFixture();
    h2 = await startGatewayFixture({ apiserverHttp2: true });
  });
  after(async () => {
    await h1.close();
    await h2.close();
  });

  test("identity headers and the token arrive exactly as over HTTP/1.1, with a passed-through token too", async () => {
    const impersonating: [string, string][] = [
      ["Cluster-Proxy-Target", "kube"],
      ["Impersonate-User", "cluster:hub:alice"],
      ["Impersonate-Group", "cluster:hub:devs"],
      ["Impersonate-Group", "system:authenticated"],
      ["Impersonate-Uid", "1234"],
      ["Impersonate-Extra-Scopes", "view"],
      ["Authorization", "Bearer the-callers-token"],
      ["X-Remote-User", "system:admin"],
      ["Accept", "application/json"],
    ];
    const passthrough: [string, string][] = [
      ["Cluster-Proxy-Target", "kube"],
      ["Cluster-Proxy-Passthrough", "true"],
      ["Authorization", "Bearer a-cluster-token"],
    ];
    for (const headers of [impersonating, passthrough]) {
      assert.equal((await call(h1, { headers })).status, 200);
      assert.equal((await call(h2, { headers })).status, 200);
      const [one, two] = [h1.apiserver.received.at(-1), h2.apiserver.received.at(-1)];
      assert.equal(one?.httpVersion, "1.1");
      assert.equal(two?.httpVersion, "2.0");
      // Host names the apiserver (its port differs between the two stand-ins).
      const hostless = (r: ReceivedRequest | undefined): string[] =>
        comparable(r).filter((h) => !h.startsWith("host:"));
      assert.deepEqual(hostless(two), hostless(one));
      assert.deepEqual(headerValues(two?.rawHeaders ?? [], "host"), [`127.0.0.1:${h2.apiserver.port}`]);
    }
    assert.deepEqual(headerValues(h2.apiserver.received.at(-2)?.rawHeaders ?? [], "authorization"), [
      "Bearer sa-token-1",
    ]);
    assert.deepEqual(headerValues(h2.apiserver.received.at(-1)?.rawHeaders ?? [], "authorization"), [
      "Bearer a-cluster-token",
    ]);
  });

  test("over HTTP/1.1 too, a watch whose caller goes away is stopped upstream (its connection closed)", async () => {
    // Fresh stand-in state: h1's /stream is not released yet.
    const session = await callerSession(h1);
    try {
      const watch = session.request({ ":path": "/stream", "cluster-proxy-target": "kube", "impersonate-user": ALICE });
      watch.on("error", () => undefined);
      watch.setEncoding("utf8");
      let text = "";
      watch.on("data", (c: string) => (text += c));
      await waitUntil("the watch's first event", () => text === "first\n", WAIT);
      const open = h1.apiserver.openConnections();
      watch.close(http2.constants.NGHTTP2_CANCEL);
      await waitUntil(
        "the watch's upstream connection closed",
        () => h1.apiserver.openConnections() === open - 1,
        WAIT,
      );
    } finally {
      session.destroy();
    }
  });

  test("an HTTP/1.1-only apiserver is reached over HTTP/1.1: streams, bodies and upgrades as before", async () => {
    const before = h1.apiserver.received.length;
    assert.equal(
      (await call(h1, { method: "POST", headers: [...ID, ["Content-Length", "5"]], body: "hello" })).status,
      200,
    );
    assert.equal(h1.apiserver.received.at(-1)?.body, "hello");
    let text = "";
    const watch = await h2Call(h1.port, {
      path: "/stream",
      headers: ID,
      client: h1.gatewayClient,
      ca: h1.agentCa,
      onData: (c) => {
        text += c.toString("utf8");
        if (text === "first\n") h1.apiserver.releaseStream();
      },
    });
    assert.equal(watch.body, "first\nsecond\n");
    assert.match(await upgrade(h1), /^HTTP\/1\.1 101 /);
    assert.deepEqual(
      h1.apiserver.received.slice(before).map((r) => r.httpVersion),
      ["1.1", "1.1", "1.1"],
    );
  });
});
