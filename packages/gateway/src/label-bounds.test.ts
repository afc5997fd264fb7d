/**
 * What callers send cannot grow the gateway's state: made-up and unserved methods, over HTTP/1.1
 * and HTTP/2, are refused (405) without a new metric series, and recorded with method `other`.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import { after, before, describe, test } from "node:test";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const TOKEN = "bounds-token";
const USER = "system:serviceaccount:default:bounds";
const FLOOD = 3_000;

/** The series of the gateway's /metrics (names and labels, without values). */
async function series(f: GatewayFixture): Promise<string[]> {
  const text = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l !== "" && !l.startsWith("#"))
    .map((l) => l.slice(0, l.lastIndexOf(" ")))
    .sort();
}

/** Send `method` over `session`; resolves with the status (undefined: the stream was reset). */
function h2Status(session: http2.ClientHttp2Session, method: string, path: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const stream = session.request({ ":method": method, ":path": path, authorization: `Bearer ${TOKEN}` });
    stream.on("response", (h) => resolve(h[":status"]));
    stream.on("error", () => resolve(undefined));
    stream.on("close", () => resolve(undefined));
    stream.resume();
    stream.end();
  });
}

/** Send `method` over HTTP/1.1 with `agent`; resolves with the status (0: the connection was refused or cut). */
function h1Status(f: GatewayFixture, agent: https.Agent, method: string): Promise<number> {
  return new Promise((resolve) => {
    const req = https.request(
      {
        host: "127.0.0.1",
        port: f.port,
        path: "/mc1/api/v1/namespaces/default/configmaps",
        method,
        ca: f.servingCa,
        agent,
        headers: { authorization: `Bearer ${TOKEN}` },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", () => resolve(0));
    req.end();
  });
}

describe("label values and records from fixed sets", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({ options: { clientCaFile: "" } });
    f.hub.tokens.set(TOKEN, { username: USER, groups: [], extra: {} });
    f.hub.grantProxy(USER, "mc1", "get", "create", "update", "patch", "delete");
  });
  after(() => f.close());

  test(`${FLOOD} made-up HTTP/2 methods leave /metrics the same size`, async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    session.on("error", () => undefined);
    assert.equal(await h2Status(session, "GET", "/mc1/api"), 200);
    assert.equal(await h2Status(session, "WARMUP", "/mc1/api"), 405);
    const before = await series(f);
    const dials = f.endpoint.dialed.length;
    const methods = Array.from({ length: FLOOD }, (_, i) => (i % 3 === 0 ? `get${i}` : `X-${i}-M`));
    methods.push("get", "delete", "OPTIONS", "CONNECT2");
    for (let i = 0; i < methods.length; i += 100) {
      const statuses = await Promise.all(methods.slice(i, i + 100).map((m) => h2Status(session, m, `/mc${i}/api`)));
      for (const s of statuses) assert.equal(s, 405);
    }
    session.close();
    assert.deepEqual(await series(f), before);
    assert.equal(f.endpoint.dialed.length, dials, "nothing reached the cluster");
    assert.equal(f.hub.accessReviews.filter((r) => r.attributes.verb !== "get").length, 0);
    const refused = f.audit.filter((r) => r.code === 405);
    assert.ok(refused.length >= FLOOD);
    assert.ok(
      refused.every((r) => r.method === "other" || r.method === "OPTIONS"),
      "methods from a fixed set",
    );
    assert.ok(refused.every((r) => r.verb === undefined));
  });

  test(`${FLOOD} HTTP/1.1 requests with methods the gateway does not serve leave /metrics the same size`, async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 8 });
    const unserved = http.METHODS.filter(
      (m) => !["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT"].includes(m),
    );
    assert.equal(await h1Status(f, agent, "PROPFIND"), 405);
    const before = await series(f);
    const statuses = [];
    for (let i = 0; i < FLOOD; i += 100)
      statuses.push(
        ...(await Promise.all(
          Array.from({ length: 100 }, (_, j) => h1Status(f, agent, unserved[(i + j) % unserved.length]!)),
        )),
      );
    // Methods the parser does not know never reach the gateway (400, connection closed).
    for (let i = 0; i < 50; i++) assert.notEqual(await h1Status(f, agent, `MADEUP${i}`), 200);
    agent.destroy();
    assert.ok(
      statuses.every((s) => s === 405),
      `statuses: ${[...new Set(statuses)].join(", ")}`,
    );
    assert.deepEqual(await series(f), before);
  });

  test("the 405s are counted with verb other; served methods keep their verbs", async () => {
    const text = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
    assert.match(text, /cluster_proxy_gateway_requests_total\{cluster="_unknown",code="405",verb="other"\}/);
    assert.match(text, /cluster_proxy_gateway_requests_total\{cluster="mc1",code="200",verb="get"\}/);
    assert.equal(
      (
        await f.request("/mc1/api/v1/namespaces/default/configmaps", {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}` },
        })
      ).status,
      200,
    );
    const after = await (await fetch(`http://127.0.0.1:${f.healthPort}/metrics`)).text();
    assert.match(after, /cluster_proxy_gateway_requests_total\{cluster="mc1",code="200",verb="create"\}/);
  });
});
