/**
 * The hub verb of upgrades: exec, attach and port-forward, over SPDY or WebSocket (GET or POST),
 * and any request that asks for an upgrade, need `create` on managedclusters/proxy of the
 * cluster, as kube-apiserver 1.35+ asks `create` for them; a caller with only `get` is refused
 * 403 naming the verb, the resource and the cluster, and the endpoint sees nothing.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const READER = "system:serviceaccount:default:reader";
const WRITER = "system:serviceaccount:default:writer";
const READER_TOKEN = "reader-token";
const WRITER_TOKEN = "writer-token";

const SUBRESOURCES = ["exec?command=sh&stdin=true", "attach?stdin=true", "portforward?ports=8080"];
/** [method, Upgrade] of the upgrades kubectl and other clients send. */
const UPGRADES: [string, string][] = [
  ["POST", "SPDY/3.1"],
  ["GET", "SPDY/3.1"],
  ["GET", "websocket"],
];

/** Send an upgrade request; resolves with what came back (up to the 101's head, or all of a refusal). */
async function upgrade(f: GatewayFixture, method: string, path: string, protocol: string, token: string) {
  const socket = await f.tlsConnect();
  socket.write(
    `${method} ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nConnection: Upgrade\r\nUpgrade: ${protocol}\r\n\r\n`,
  );
  let got = "";
  socket.on("data", (c: Buffer) => {
    got += c.toString();
    if (got.startsWith("HTTP/1.1 101") && got.includes("\r\n\r\n")) socket.destroy();
  });
  socket.on("error", () => undefined);
  await once(socket, "close");
  return { status: Number(got.slice(9, 12)), body: got.slice(got.indexOf("\r\n\r\n") + 4) };
}

describe("upgrades need hub create", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({ options: { clientCaFile: "" } });
    f.hub.tokens.set(READER_TOKEN, { username: READER, groups: [], extra: {} });
    f.hub.tokens.set(WRITER_TOKEN, { username: WRITER, groups: [], extra: {} });
    f.hub.grantProxy(READER, "mc1", "get");
    f.hub.grantProxy(WRITER, "mc1", "get", "create");
  });
  after(() => f.close());

  test("exec, attach and port-forward over SPDY and WebSocket with only hub get: 403 naming create, nothing sent", async () => {
    for (const sub of SUBRESOURCES)
      for (const [method, protocol] of UPGRADES) {
        const what = `${method} ${protocol} ${sub}`;
        const dials = f.endpoint.dialed.length;
        const r = await upgrade(f, method, `/mc1/api/v1/namespaces/default/pods/p/${sub}`, protocol, READER_TOKEN);
        assert.equal(r.status, 403, what);
        assert.match(r.body, /may not "create" managedclusters\/proxy "mc1"/, what);
        assert.match(r.body, /upgrade/, what);
        assert.equal(f.endpoint.dialed.length, dials, `${what}: the endpoint was dialled`);
        const rec = f.audit.at(-1)!;
        assert.equal(rec.decision, "deny", what);
        assert.equal(rec.upgrade, true, what);
      }
  });

  test("with hub create they are relayed (101), and audited as create", async () => {
    for (const sub of SUBRESOURCES)
      for (const [method, protocol] of UPGRADES) {
        const what = `${method} ${protocol} ${sub}`;
        const r = await upgrade(f, method, `/mc1/api/v1/namespaces/default/pods/p/${sub}`, protocol, WRITER_TOKEN);
        assert.equal(r.status, 101, `${what}: ${r.body}`);
      }
    assert.equal(f.auditLines.filter((l) => l.stage === "start").at(-1)?.verb, "create");
    const last = f.hub.accessReviews.at(-1)!;
    assert.equal(last.attributes.verb, "create");
    assert.equal(last.attributes.name, "mc1");
  });

  test("any request asking for an upgrade needs create; a plain GET still needs only get", async () => {
    const h = { authorization: `Bearer ${READER_TOKEN}` };
    assert.equal((await f.request("/mc1/api/v1/namespaces/default/pods/p", { headers: h })).status, 200);
    for (const headers of [
      { ...h, upgrade: "websocket" },
      { ...h, connection: "keep-alive, Upgrade" },
    ]) {
      const r = await f.request("/mc1/api/v1/namespaces/default/pods/p/exec?command=id", { headers });
      assert.equal(r.status, 403, JSON.stringify(headers));
      assert.match(r.body, /"create" managedclusters\/proxy "mc1"/);
    }
    // A Service's WebSocket too.
    f.hub.setConfigMap({ services: "- clusters: [mc1]\n  namespace: web\n  service: ws\n  port: 80\n" });
    const svc = await upgrade(
      f,
      "GET",
      "/mc1/api/v1/namespaces/web/services/ws:80/proxy-service/socket",
      "websocket",
      READER_TOKEN,
    );
    assert.equal(svc.status, 403);
    assert.match(svc.body, /"create" managedclusters\/proxy "mc1"/);
  });

  test("an upgrade does not lessen its method: a DELETE upgrade needs delete as well as create", async () => {
    const r = await upgrade(f, "DELETE", "/mc1/api/v1/namespaces/default/pods/p", "websocket", WRITER_TOKEN);
    assert.equal(r.status, 403);
    assert.match(r.body, /may not "delete" managedclusters\/proxy "mc1"/);
  });

  test("CONNECT is not served: HTTP/2 (extended CONNECT of WebSocket over HTTP/2 included) and HTTP/1.1", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    session.on("error", () => undefined);
    const dials = f.endpoint.dialed.length;
    const stream = session.request({
      ":method": "CONNECT",
      ":authority": "127.0.0.1:443",
      authorization: `Bearer ${WRITER_TOKEN}`,
    });
    stream.on("error", () => undefined);
    const status = await new Promise<number | undefined>((resolve) => {
      stream.on("response", (h) => resolve(h[":status"]));
      stream.on("close", () => resolve(undefined));
    });
    assert.ok(status === undefined || status === 405, `status ${status}`);
    assert.equal(f.endpoint.dialed.length, dials);
    assert.equal(http2.getDefaultSettings().enableConnectProtocol, false);
    session.destroy();
    // Over HTTP/1.1: answered 405 and closed (not left hanging).
    const socket = await f.tlsConnect();
    socket.write(
      `CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\nAuthorization: Bearer ${WRITER_TOKEN}\r\n\r\n`,
    );
    let got = "";
    socket.on("data", (c: Buffer) => (got += c.toString()));
    socket.on("error", () => undefined);
    const timer = setTimeout(() => socket.destroy(), 20_000);
    await once(socket, "close");
    clearTimeout(timer);
    assert.match(got, /^HTTP\/1.1 405 /);
    assert.equal(f.endpoint.dialed.length, dials);
    assert.equal(f.audit.at(-1)?.method, "CONNECT");
    assert.equal(f.audit.at(-1)?.code, 405);
  });
});
