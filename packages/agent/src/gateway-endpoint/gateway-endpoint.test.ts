/**
 * The gateway endpoint against stand-ins on loopback (docs/design/gateway.md, the gateway ->
 * agent contract): impersonation with the agent's token (rotations picked up), pass-through,
 * refusals, Service targets with verified TLS, header stripping, streaming, upgrades with
 * half-close, and the mutual TLS (client certificates from the gateway CA only, reloaded).
 */
import assert from "node:assert/strict";
import * as diagnostics from "node:diagnostics_channel";
import { writeFile } from "node:fs/promises";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import { freePort, waitUntil } from "@cluster-proxy/tunnel/testing";
import { headerValues } from "./gateway-request.js";
import {
  callerSession,
  h2Call,
  startGatewayFixture,
  TEST_SERVICE_HOST,
  type GatewayFixture,
} from "../testing/gateway-fixture.js";

interface Answer {
  status: number;
  body: string;
}

interface Call {
  path?: string;
  method?: string;
  headers?: [string, string][];
  client?: { cert: string; key: string } | null;
  body?: string;
}

/** One request to the endpoint over a fresh mutual-TLS HTTP/2 session. */
async function call(fx: GatewayFixture, c: Call): Promise<Answer> {
  const client = c.client === undefined ? fx.gatewayClient : c.client;
  const a = await h2Call(fx.port, {
    path: c.path ?? "/api/v1/namespaces/default/pods?limit=1",
    method: c.method ?? "GET",
    headers: c.headers ?? [],
    ...(c.body !== undefined ? { body: c.body } : {}),
    client,
    ca: fx.agentCa,
  });
  return { status: a.status, body: a.body };
}

const KUBE: [string, string] = ["Cluster-Proxy-Target", "kube"];

describe("gateway endpoint", () => {
  let fx: GatewayFixture;
  before(async () => {
    fx = await startGatewayFixture();
  });
  after(async () => {
    await fx.close();
  });

  test("impersonation: the agent's token replaces Authorization, Impersonate-* arrive exactly, Cluster-Proxy-* are gone", async () => {
    const answer = await call(fx, {
      path: "/api/v1/namespaces/default/pods?watch=false&limit=2",
      headers: [
        KUBE,
        ["Impersonate-User", "cluster:hub:alice"],
        ["Impersonate-Group", "cluster:hub:devs"],
        ["Impersonate-Group", "cluster:hub:system:authenticated"],
        ["Impersonate-Uid", "1234"],
        ["Impersonate-Extra-Scopes", "view"],
        ["Authorization", "Bearer the-callers-token"],
        ["Cluster-Proxy-Audit-Id", "abc"],
        ["Accept", "application/json"],
      ],
    });
    assert.equal(answer.status, 200);
    const got = fx.apiserver.received.at(-1);
    assert.ok(got);
    assert.equal(got.url, "/api/v1/namespaces/default/pods?watch=false&limit=2");
    const h = got.rawHeaders;
    assert.deepEqual(headerValues(h, "authorization"), ["Bearer sa-token-1"]);
    assert.deepEqual(headerValues(h, "impersonate-user"), ["cluster:hub:alice"]);
    assert.deepEqual(headerValues(h, "impersonate-group"), ["cluster:hub:devs", "cluster:hub:system:authenticated"]);
    assert.deepEqual(headerValues(h, "impersonate-uid"), ["1234"]);
    assert.deepEqual(headerValues(h, "impersonate-extra-scopes"), ["view"]);
    assert.deepEqual(headerValues(h, "accept"), ["application/json"]);
    assert.deepEqual(headerValues(h, "host"), [`127.0.0.1:${fx.apiserver.port}`]);
    for (let i = 0; i < h.length; i += 2) assert.doesNotMatch(h[i] ?? "", /^cluster-proxy-/i);
  });

  test("a rotated ServiceAccount token is used by the next request", async () => {
    await writeFile(fx.paths.token, "sa-token-2\n");
    const answer = await call(fx, { headers: [KUBE, ["Impersonate-User", "cluster:hub:bob"]] });
    assert.equal(answer.status, 200);
    assert.deepEqual(headerValues(fx.apiserver.received.at(-1)?.rawHeaders ?? [], "authorization"), [
      "Bearer sa-token-2",
    ]);
  });

  test("pass-through forwards the caller's Authorization unchanged and adds no credential", async () => {
    const answer = await call(fx, {
      headers: [KUBE, ["Cluster-Proxy-Passthrough", "true"], ["Authorization", "Bearer callers-own"]],
    });
    assert.equal(answer.status, 200);
    const h = fx.apiserver.received.at(-1)?.rawHeaders ?? [];
    assert.deepEqual(headerValues(h, "authorization"), ["Bearer callers-own"]);
    assert.deepEqual(headerValues(h, "cluster-proxy-passthrough"), []);
  });

  test("kube without an identity, an unknown target and no target are refused with 400", async () => {
    const before = fx.apiserver.received.length;
    const none = await call(fx, { headers: [KUBE, ["Authorization", "Bearer x"]] });
    assert.equal(none.status, 400);
    assert.match(none.body, /refusing to send a request as the agent itself/);
    const unknown = await call(fx, { headers: [["Cluster-Proxy-Target", "node"]] });
    assert.equal(unknown.status, 400);
    assert.match(unknown.body, /unknown Cluster-Proxy-Target "node"/);
    const missing = await call(fx, { headers: [["Impersonate-User", "cluster:hub:alice"]] });
    assert.equal(missing.status, 400);
    assert.match(missing.body, /missing Cluster-Proxy-Target/);
    assert.equal(fx.apiserver.received.length, before, "nothing reached the apiserver");
  });

  test("a Service target: forwarded over verified TLS, Authorization dropped; a malformed one is a 400 naming the header", async () => {
    const answer = await call(fx, {
      path: "/metrics?x=1",
      method: "POST",
      body: "payload",
      headers: [
        ["Cluster-Proxy-Target", "service"],
        ["Cluster-Proxy-Service", `https://${TEST_SERVICE_HOST}:${fx.service.port}`],
        ["Authorization", "Bearer hub-token"],
      ],
    });
    assert.equal(answer.status, 200, answer.body);
    const got = fx.service.received.at(-1);
    assert.ok(got);
    assert.equal(got.url, "/metrics?x=1");
    assert.equal(got.method, "POST");
    assert.equal(got.body, "payload");
    assert.deepEqual(headerValues(got.rawHeaders, "authorization"), []);
    assert.deepEqual(headerValues(got.rawHeaders, "host"), [`${TEST_SERVICE_HOST}:${fx.service.port}`]);
    for (const bad of [
      "https://web.apps.svc",
      "ftp://web.apps.svc:80",
      "https://Web.apps.svc:80",
      "https://web.apps.svc:70000",
      "https://web.apps.svc.cluster.local:80",
      "https://web.apps.svc:80/x",
    ]) {
      const refused = await call(fx, {
        headers: [
          ["Cluster-Proxy-Target", "service"],
          ["Cluster-Proxy-Service", bad],
        ],
      });
      assert.equal(refused.status, 400, bad);
      assert.match(refused.body, /^Cluster-Proxy-Service /, bad);
    }
  });

  test("an unreachable target is a 502 naming it and the cause", async () => {
    const closed = await freePort();
    const answer = await call(fx, {
      headers: [
        ["Cluster-Proxy-Target", "service"],
        ["Cluster-Proxy-Service", `http://${TEST_SERVICE_HOST}:${closed}`],
      ],
    });
    assert.equal(answer.status, 502);
    assert.match(
      answer.body,
      new RegExp(`^gateway endpoint: service http://${TEST_SERVICE_HOST}:${closed}: .*ECONNREFUSED`),
    );
    assert.equal(answer.body.trim().split("\n").length, 1, "one line");
  });

  test("a chunked response flows before it ends (a watch)", async () => {
    // The first chunk arrives while the stand-in still holds the response open; only then is it released.
    let firstChunk = "";
    let text = "";
    const answer = await h2Call(fx.port, {
      path: "/stream",
      headers: [
        ["Cluster-Proxy-Target", "kube"],
        ["Impersonate-User", "cluster:hub:alice"],
      ],
      client: fx.gatewayClient,
      ca: fx.agentCa,
      onData: (chunk) => {
        text += chunk.toString("utf8");
        if (!firstChunk) {
          firstChunk = text;
          fx.apiserver.releaseStream();
        }
      },
    });
    const whole = answer.body;
    assert.equal(firstChunk, "first\n");
    assert.equal(whole, "first\nsecond\n");
  });

  test("an upgrade is relayed both ways with half-close", async () => {
    const socket = tls.connect({
      host: "127.0.0.1",
      port: fx.port,
      ca: fx.agentCa,
      ...fx.gatewayClient,
      checkServerIdentity: () => undefined,
    });
    let received = "";
    const ended = new Promise<void>((resolve, reject) => {
      socket.on("data", (chunk: Buffer) => {
        received += chunk.toString("latin1");
        if (received.endsWith("echo:hello") && !socket.writableEnded) socket.end();
      });
      socket.on("end", () => resolve());
      socket.on("error", reject);
    });
    socket.write(
      [
        "POST /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1",
        "Host: gateway",
        "Connection: Upgrade",
        "Upgrade: SPDY/3.1",
        "X-Stream-Protocol-Version: v4.channel.k8s.io",
        "Cluster-Proxy-Target: kube",
        "Impersonate-User: cluster:hub:alice",
        "",
        "",
      ].join("\r\n"),
    );
    await new Promise<void>((resolve) =>
      socket.on("data", () => {
        if (received.includes("\r\n\r\n")) resolve();
      }),
    );
    assert.match(received, /^HTTP\/1\.1 101 /);
    assert.match(received, /\r\nX-Stream-Protocol-Version: v4\.channel\.k8s\.io\r\n/i);
    socket.write("hello");
    // After our end, the stand-in still sends "bye" (half-close), then ends.
    assert.equal(await fx.apiserver.upgradeClientEnded, "hello");
    await ended;
    assert.ok(received.endsWith("echo:hellobye"), received);
    const upgrade = fx.apiserver.received.at(-1);
    assert.deepEqual(headerValues(upgrade?.rawHeaders ?? [], "upgrade"), ["SPDY/3.1"]);
    assert.deepEqual(headerValues(upgrade?.rawHeaders ?? [], "authorization"), ["Bearer sa-token-2"]);
    socket.destroy();
  });

  test("an upgrade the target answers without 101 is relayed as a normal response", async () => {
    const socket = tls.connect({
      host: "127.0.0.1",
      port: fx.port,
      ca: fx.agentCa,
      ...fx.gatewayClient,
      checkServerIdentity: () => undefined,
    });
    let text = "";
    socket.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")));
    const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
    socket.write(
      "GET /no-upgrade HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nCluster-Proxy-Target: kube\r\nImpersonate-User: cluster:hub:alice\r\n\r\n",
    );
    await closed;
    assert.match(text, /^HTTP\/1\.1 403 Forbidden\r\n/);
    assert.ok(text.endsWith("\r\n\r\nnope"), text);
  });

  test("client certificates from another CA, or none, are refused at the handshake", async () => {
    const before = fx.apiserver.received.length;
    await assert.rejects(
      call(fx, { client: fx.agentCaClient, headers: [KUBE, ["Impersonate-User", "cluster:hub:alice"]] }),
    );
    await assert.rejects(call(fx, { client: null, headers: [KUBE, ["Impersonate-User", "cluster:hub:alice"]] }));
    assert.equal(fx.apiserver.received.length, before);
  });

  test("a changed gateway CA file is picked up", async () => {
    const headers: [string, string][] = [KUBE, ["Impersonate-User", "cluster:hub:alice"]];
    await assert.rejects(call(fx, { client: fx.nextGatewayClient, headers }));
    await writeFile(fx.paths.gatewayCa, fx.nextGatewayCaPem);
    assert.equal(await fx.endpoint.reloadNow(), "reloaded");
    assert.equal((await call(fx, { client: fx.nextGatewayClient, headers })).status, 200);
    await assert.rejects(call(fx, { headers }));
  });
});

describe("gateway endpoint, Service with a CA it is not signed by", () => {
  test("the Service's certificate is refused: 502 naming the Service", async () => {
    const fx = await startGatewayFixture({ serviceCa: "wrong" });
    try {
      const answer = await call(fx, {
        headers: [
          ["Cluster-Proxy-Target", "service"],
          ["Cluster-Proxy-Service", `https://${TEST_SERVICE_HOST}:${fx.service.port}`],
        ],
      });
      assert.equal(answer.status, 502);
      assert.match(
        answer.body,
        new RegExp(`^gateway endpoint: service https://${TEST_SERVICE_HOST}:${fx.service.port}: `),
      );
      assert.equal(fx.service.received.length, 0);
    } finally {
      await fx.close();
    }
  });
});

describe("gateway endpoint connection cap", () => {
  test("a connection over the cap is closed at once; the one under it is served", async () => {
    const fx = await startGatewayFixture({ maxConnections: 1 });
    try {
      const first = tls.connect({
        host: "127.0.0.1",
        port: fx.port,
        ca: fx.agentCa,
        ...fx.gatewayClient,
        checkServerIdentity: () => undefined,
      });
      await new Promise<void>((resolve, reject) => {
        first.once("secureConnect", () => resolve());
        first.once("error", reject);
      });
      assert.equal(fx.endpoint.connectionCount, 1);
      await assert.rejects(call(fx, { headers: [KUBE, ["Impersonate-User", "cluster:hub:alice"]] }));
      first.destroy();
    } finally {
      await fx.close();
    }
  });
});

/** Send `raw` over a fresh mutual-TLS HTTP/1.1 connection to the endpoint; the bytes back until it closes. */
async function http1(fx: GatewayFixture, raw: string): Promise<string> {
  const socket = tls.connect({
    host: "127.0.0.1",
    port: fx.port,
    ca: fx.agentCa,
    ...fx.gatewayClient,
    ALPNProtocols: ["http/1.1"],
    checkServerIdentity: () => undefined,
  });
  let text = "";
  socket.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")));
  socket.on("error", () => undefined);
  const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
  socket.write(raw);
  await closed;
  return text;
}

describe("gateway endpoint: framing, old gateways, hostile answers, HTTP/2 bounds", () => {
  let fx: GatewayFixture;
  const ID: [string, string][] = [KUBE, ["Impersonate-User", "cluster:hub:alice"]];
  before(async () => {
    fx = await startGatewayFixture({ maxConcurrentStreams: 2, idleSessionTimeoutMs: 300 });
  });
  after(async () => {
    await fx.close();
  });

  test("a body on GET, HEAD, DELETE or OPTIONS without content-length is 400 and nothing goes upstream", async () => {
    const before = fx.apiserver.received.length;
    for (const method of ["GET", "HEAD", "DELETE", "OPTIONS"]) {
      const answer = await call(fx, { method, headers: ID, body: "POST /api HTTP/1.1\r\nHost: x\r\n\r\n" });
      assert.equal(answer.status, 400, method);
    }
    assert.equal(fx.apiserver.received.length, before);
  });

  test("upstream bodies are framed explicitly: the declared length, else chunked; never raw", async () => {
    assert.equal((await call(fx, { headers: [...ID, ["Content-Length", "5"]], body: "hello" })).status, 200);
    const withLength = fx.apiserver.received.at(-1);
    assert.equal(withLength?.body, "hello");
    assert.deepEqual(headerValues(withLength?.rawHeaders ?? [], "content-length"), ["5"]);
    assert.deepEqual(headerValues(withLength?.rawHeaders ?? [], "transfer-encoding"), []);
    assert.equal((await call(fx, { method: "POST", headers: ID, body: "{}" })).status, 200);
    const streamed = fx.apiserver.received.at(-1);
    assert.equal(streamed?.body, "{}");
    assert.deepEqual(headerValues(streamed?.rawHeaders ?? [], "transfer-encoding"), ["chunked"]);
    assert.deepEqual(headerValues(streamed?.rawHeaders ?? [], "content-length"), []);
  });

  test("a plain HTTP/1.1 request (an old gateway) is 505 and never forwarded; an upgrade with a body is 400", async () => {
    const before = fx.apiserver.received.length;
    const plain = await http1(
      fx,
      "GET /api HTTP/1.1\r\nHost: g\r\nCluster-Proxy-Target: kube\r\nImpersonate-User: cluster:hub:alice\r\n\r\n" +
        "POST /api HTTP/1.1\r\nHost: g\r\nCluster-Proxy-Target: kube\r\nImpersonate-User: system:admin\r\n\r\n",
    );
    assert.match(plain, /^HTTP\/1\.1 505 /);
    assert.equal(plain.match(/HTTP\/1\.1 \d{3} /g)?.length, 1, "one answer, the connection closed");
    const withBody = await http1(
      fx,
      "POST /exec HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 5\r\n" +
        "Cluster-Proxy-Target: kube\r\nImpersonate-User: cluster:hub:alice\r\n\r\nhello",
    );
    assert.match(withBody, /^HTTP\/1\.1 400 /);
    assert.equal(fx.apiserver.received.length, before);
  });

  test("an answer with status 600 is 502, HTTP2-Settings and Upgrade are dropped; the endpoint keeps serving", async () => {
    const odd = await h2Call(fx.port, { path: "/status-600", headers: ID, client: fx.gatewayClient, ca: fx.agentCa });
    assert.equal(odd.status, 502);
    assert.match(odd.body, /status 600/);
    const settings = await h2Call(fx.port, {
      path: "/http2-settings",
      headers: ID,
      client: fx.gatewayClient,
      ca: fx.agentCa,
    });
    assert.equal(settings.status, 200);
    assert.equal(settings.headers["http2-settings"], undefined);
    assert.equal(settings.headers.upgrade, undefined);
    assert.equal(settings.body, "settings\n");
    assert.equal((await call(fx, { headers: ID })).status, 200);
  });

  test("a session gets at most its max concurrent streams; a session without streams gets GOAWAY", async () => {
    const session = await callerSession(fx);
    try {
      assert.equal(session.remoteSettings.maxConcurrentStreams, 2);
      const before = fx.apiserver.received.length;
      const streams = [0, 1, 2].map(() => {
        const s = session.request({
          ":path": "/stream",
          "cluster-proxy-target": "kube",
          "impersonate-user": "cluster:hub:alice",
        });
        s.on("error", () => undefined);
        s.resume();
        return s;
      });
      // Two streams are served (held by the stand-in); the third waits for one of them.
      await Promise.all(streams.slice(0, 2).map((s) => once(s, "response")));
      assert.equal(fx.apiserver.received.length, before + 2);
      let goaway = false;
      session.once("goaway", () => (goaway = true));
      fx.apiserver.releaseStream();
      await Promise.all(streams.map((s) => once(s, "end")));
      assert.equal(fx.apiserver.received.length, before + 3);
      assert.equal(goaway, false, "no GOAWAY while streams ran");
      await once(session, "goaway");
    } finally {
      session.destroy();
    }
  });
});

describe("gateway endpoint: the gateway's session", () => {
  let fx: GatewayFixture;
  before(async () => {
    fx = await startGatewayFixture({ apiserverHttp2: true });
  });
  after(async () => {
    await fx.close();
  });

  test("1,500 answered streams the gateway resets (one user's cancelled watches) leave the session and another user's stream running", async () => {
    // nghttp2 closes a node server's session after about 1,000 received resets (INTERNAL_ERROR),
    // which would fail every user's request on the gateway's one session to this cluster.
    const session = await callerSession(fx);
    let goaway: number | undefined;
    session.on("goaway", (code: number) => (goaway = code));
    const watch = (user: string): http2.ClientHttp2Stream =>
      session.request({
        ":path": "/stream",
        "cluster-proxy-target": "kube",
        "impersonate-user": `cluster:hub:${user}`,
      });
    try {
      const victim = watch("bob");
      victim.setEncoding("utf8");
      let text = "";
      victim.on("data", (c: string) => (text += c));
      let victimError: Error | undefined;
      victim.on("error", (err: Error) => (victimError = err));
      await once(victim, "response");
      for (let batch = 0; batch < 60; batch++) {
        const streams = Array.from({ length: 25 }, () => watch("mallory"));
        await Promise.all(
          streams.map(async (s) => {
            s.on("error", () => undefined);
            await once(s, "response");
            s.close(http2.constants.NGHTTP2_CANCEL);
          }),
        );
      }
      assert.equal(goaway, undefined, "no GOAWAY");
      assert.equal(victimError, undefined);
      assert.equal(victim.closed, false, "the other user's stream still runs");
      fx.apiserver.releaseStream();
      await once(victim, "end");
      assert.equal(text, "first\nsecond\n");
    } finally {
      session.destroy();
    }
  });

  test("over the tunnel's in-process stream, a body-less request's stream is destroyed only after its answer's last write completed", async () => {
    // Read to its end before the answer, node destroys the stream at its close with that write
    // still pending (over a JS stream a write completes a turn later) and builds an
    // ERR_STREAM_DESTROYED, stack trace and all, for every answer.
    const finishedAtClose: boolean[] = [];
    const onStart = (message: unknown): void => {
      // node:http2's documented message for this channel.
      const { stream, headers } = message as { stream: http2.ServerHttp2Stream; headers: http2.IncomingHttpHeaders };
      if (headers["cluster-proxy-target"] === undefined) return; // the stand-in apiserver's streams
      stream.once("close", () => finishedAtClose.push(stream.writableFinished));
    };
    diagnostics.subscribe("http2.server.stream.start", onStart);
    const session = await callerSession(fx, true);
    try {
      for (const path of ["/sized", "/api/v1/namespaces", "/sized", "/api/v1/namespaces"]) {
        const s = session.request({
          ":path": path,
          "cluster-proxy-target": "kube",
          "impersonate-user": "cluster:hub:bob",
        });
        s.resume();
        const closed = once(s, "close");
        const [headers] = (await once(s, "response")) as [http2.IncomingHttpHeaders];
        assert.equal(headers[":status"], 200, path);
        await closed;
      }
      await waitUntil("the endpoint's four streams to close", () => finishedAtClose.length === 4);
      assert.deepEqual(finishedAtClose, [true, true, true, true]);
    } finally {
      diagnostics.unsubscribe("http2.server.stream.start", onStart);
      session.destroy();
    }
  });
});

describe("gateway endpoint drain (the agent's first SIGTERM)", { timeout: 60_000 }, () => {
  test("GOAWAY on every session naming its last stream: that stream finishes, then the session closes; new sessions are served", async () => {
    const fx = await startGatewayFixture();
    try {
      const session = await callerSession(fx);
      const goaway = once(session, "goaway") as Promise<[number, number]>;
      const closed = once(session, "close");
      const stream = session.request({
        ":method": "GET",
        ":path": "/stream",
        "cluster-proxy-target": "kube",
        "impersonate-user": "cluster:hub:alice",
      });
      stream.end();
      let text = "";
      stream.on("data", (c: Buffer) => (text += c.toString("utf8")));
      await once(stream, "response");
      while (!text.includes("first")) await once(stream, "data");
      // A watch is running when the agent starts draining.
      fx.endpoint.drain();
      const [code, lastStreamId] = await goaway;
      assert.equal(code, http2.constants.NGHTTP2_NO_ERROR);
      assert.equal(lastStreamId, stream.id, "the running stream is covered: it goes on");
      fx.apiserver.releaseStream();
      await once(stream, "end");
      assert.equal(text, "first\nsecond\n");
      await closed;
      // Still the cluster's agent until it exits: a new session is served.
      const answer = await call(fx, { headers: [KUBE, ["Impersonate-User", "cluster:hub:alice"]] });
      assert.equal(answer.status, 200);
    } finally {
      await fx.close();
    }
  });
});
