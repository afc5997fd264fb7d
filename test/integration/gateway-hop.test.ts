/**
 * The real gateway in front of the real agent gateway endpoint (issue 39): the hop between them
 * cannot desync and no answer can crash the gateway. The gateway dials the endpoint over loopback
 * (no tunnel: what crosses the hop is the same); behind the endpoint are the stand-in
 * kube-apiserver and Service of the agent's fixture, which record every request they receive.
 *
 * - A GET whose chunked body holds a second request (the cluster-admin binding of the issue), over
 *   HTTP/1.1 and HTTP/2, is answered 400 and nothing reaches the apiserver; with a declared length
 *   it is exactly one GET there.
 * - Answers with `HTTP2-Settings` or status 600 leave the gateway serving; the caller gets a
 *   well-formed answer (502 for the status), over HTTP/1.1 and HTTP/2.
 * - Upgrades work, each on a connection of its own, without `Content-Length`; watches stream; many
 *   concurrent requests share one HTTP/2 session.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import type { Gateway } from "@cluster-proxy/gateway";
import { startGatewayFixture, type GatewayFixture } from "../../packages/agent/src/testing/gateway-fixture.js";
import {
  ALICE_TOKEN as TOKEN,
  startGatewayBeforeEndpoint,
  type GatewayBeforeEndpoint,
  type H2Answer,
} from "../infra/gateway/gateway-before-endpoint.js";

const SMUGGLED =
  "POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings HTTP/1.1\r\n" +
  "Host: x\r\nCluster-Proxy-Target: kube\r\nImpersonate-User: system:admin\r\n" +
  "Impersonate-Group: system:masters\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/** A chunked body of `text`. */
function chunked(text: string): string {
  return `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n0\r\n\r\n`;
}

describe("gateway -> agent endpoint hop", { timeout: 120_000 }, () => {
  let fx: GatewayFixture;
  let gateway: Gateway;
  let port = 0;
  let servingCa = "";
  let gw: GatewayBeforeEndpoint;

  before(async () => {
    fx = await startGatewayFixture();
    gw = await startGatewayBeforeEndpoint(fx, fx.port);
    ({ gateway, port, servingCa } = gw);
  });

  after(async () => {
    await gw.close();
    await fx.close();
  });

  /** A fresh HTTP/1.1 TLS connection to the gateway, once its handshake is done. */
  async function http1Connection(): Promise<tls.TLSSocket> {
    const socket = tls.connect({
      host: "127.0.0.1",
      port,
      ca: servingCa,
      servername: "localhost",
      ALPNProtocols: ["http/1.1"],
    });
    await once(socket, "secureConnect");
    return socket;
  }

  /** Send `raw` over a fresh HTTP/1.1 TLS connection to the gateway; the bytes back until it closes. */
  async function http1(raw: string): Promise<string> {
    const socket = await http1Connection();
    let got = "";
    socket.on("data", (c: Buffer) => (got += c.toString("latin1")));
    socket.write(raw);
    await once(socket, "close");
    return got;
  }

  /** One HTTP/2 request to the gateway as alice; `body` undefined ends the stream with the HEADERS frame. */
  const h2 = (headers: http2.OutgoingHttpHeaders, body?: string): Promise<H2Answer> => gw.h2(headers, body);

  const apiserverSaw = (): string[] => fx.apiserver.received.map((r) => `${r.method} ${r.url}`);

  test("HTTP/1.1: a GET with a chunked body holding a second request is 400 and nothing reaches the apiserver", async () => {
    const before = fx.apiserver.received.length;
    for (const method of ["GET", "HEAD", "DELETE", "OPTIONS"]) {
      const answer = await http1(
        `${method} /east/version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${TOKEN}\r\n` +
          `Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunked(SMUGGLED)}`,
      );
      // OPTIONS is not served at all (405); the others are refused for their framing.
      assert.match(answer, method === "OPTIONS" ? /^HTTP\/1\.1 405 / : /^HTTP\/1\.1 400 /, `${method}: ${answer}`);
    }
    assert.deepEqual(apiserverSaw().slice(before), []);
  });

  test("HTTP/1.1: the same body with a declared length is exactly one GET at the apiserver", async () => {
    const before = fx.apiserver.received.length;
    const answer = await http1(
      `GET /east/version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${TOKEN}\r\n` +
        `Content-Length: ${Buffer.byteLength(SMUGGLED)}\r\nConnection: close\r\n\r\n${SMUGGLED}`,
    );
    assert.match(answer, /^HTTP\/1\.1 200 /, answer);
    assert.deepEqual(apiserverSaw().slice(before), ["GET /version"]);
    assert.equal(fx.apiserver.received.at(-1)?.body, SMUGGLED, "the body stays a body");
  });

  test("HTTP/2: DATA on a GET without content-length is 400; a content-length that disagrees with DATA never completes a request", async () => {
    const before = fx.apiserver.received.length;
    for (const method of ["GET", "DELETE", "OPTIONS"]) {
      const r = await h2({ ":method": method, ":path": "/east/version" }, SMUGGLED);
      assert.equal(r.status, method === "OPTIONS" ? 405 : 400, `${method}: ${r.status} ${r.body}`);
    }
    const short = await h2({ ":method": "GET", ":path": "/east/version", "content-length": "3" }, SMUGGLED);
    assert.notEqual(short.status, 200, "a content-length shorter than DATA is not relayed");
    const long = await h2({ ":method": "POST", ":path": "/east/api/v1/namespaces", "content-length": "9999" }, "{}");
    assert.notEqual(long.status, 200, "a content-length longer than DATA is not relayed");
    const seen = apiserverSaw().slice(before);
    assert.ok(
      seen.every((r) => !r.includes("clusterrolebindings") && !r.startsWith("POST")),
      `the apiserver saw: ${seen.join(", ")}`,
    );
    // The gateway still serves.
    assert.equal((await h2({ ":method": "GET", ":path": "/east/version" })).status, 200);
  });

  test("an answer with HTTP2-Settings or status 600 leaves the gateway serving; callers get well-formed answers", async () => {
    const odd = await h2({ ":method": "GET", ":path": "/east/status-600" });
    assert.equal(odd.status, 502, odd.body);
    assert.match(odd.body, /status 600/);
    const settings = await h2({ ":method": "GET", ":path": "/east/http2-settings" });
    assert.equal(settings.status, 200);
    assert.equal(settings.headers["http2-settings"], undefined);
    assert.equal(settings.body, "settings\n");
    const odd1 = await http1(
      `GET /east/status-600 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\n\r\n`,
    );
    assert.match(odd1, /^HTTP\/1\.1 502 /, odd1);
    const settings1 = await http1(
      `GET /east/http2-settings HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\n\r\n`,
    );
    assert.match(settings1, /^HTTP\/1\.1 200 /, settings1);
    assert.doesNotMatch(settings1, /http2-settings/i);
    assert.equal((await h2({ ":method": "GET", ":path": "/east/version" })).status, 200);
  });

  test("upgrades work, each on a connection of its own, with no Content-Length", async () => {
    const sessions = gateway.pool.sessionsFor("east");
    const before = fx.apiserver.received.length;
    const dials = sessions.dials;
    for (let i = 0; i < 2; i++) {
      const socket = await http1Connection();
      let got = "";
      socket.on("data", (c: Buffer) => {
        got += c.toString("latin1");
        if (got.includes("\r\n\r\n") && !got.includes("echo:")) socket.write(`ping${i}`);
      });
      socket.write(
        `POST /east/api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: localhost\r\n` +
          `Authorization: Bearer ${TOKEN}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n`,
      );
      while (!got.includes(`echo:ping${i}`)) await once(socket, "data");
      assert.match(got, /^HTTP\/1\.1 101 /);
      socket.end();
      await once(socket, "close");
    }
    const upgrades = fx.apiserver.received.slice(before);
    assert.equal(upgrades.length, 2);
    for (const u of upgrades) {
      assert.equal(u.method, "POST");
      assert.deepEqual(
        u.rawHeaders.filter(
          (_, i) => i % 2 === 0 && /^(content-length|transfer-encoding)$/i.test(u.rawHeaders[i] ?? ""),
        ),
        [],
      );
    }
    assert.equal(sessions.dials - dials, 2, "one connection per upgrade");
  });

  test("a watch streams; many concurrent requests multiplex on one session", async () => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { ca: servingCa, servername: "localhost" });
    try {
      const stream = session.request({ ":path": "/east/stream", authorization: `Bearer ${TOKEN}` });
      stream.end();
      const [first] = (await once(stream, "data")) as [Buffer];
      assert.equal(first.toString(), "first\n");
      fx.apiserver.releaseStream();
      stream.resume();
      await once(stream, "end");
    } finally {
      session.close();
    }
    const sessions = gateway.pool.sessionsFor("east");
    const dials = sessions.dials;
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => h2({ ":method": "GET", ":path": `/east/api/v1/namespaces/n${i}` })),
    );
    for (const a of answers) assert.equal(a.status, 200);
    assert.equal(sessions.dials - dials, 0, "no new dial: the open session carried them");
    assert.equal(sessions.sessionCount, 1);
  });
});
