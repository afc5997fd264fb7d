/**
 * The audit trail of long-running requests and of the fleet view: a watch and an upgraded stream
 * are on record from their start (a start line, then the record when they end, with the same
 * requestID), and the fleet view's requests, refusals included, are audited like any other.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const TOKEN = "audit-token";
const USER = "system:serviceaccount:default:audited";
const bearer = { authorization: `Bearer ${TOKEN}` };

describe("audit: start lines and the fleet view", () => {
  let f: GatewayFixture;
  before(async () => {
    f = await startGatewayFixture({ options: { clientCaFile: "" } });
    f.hub.tokens.set(TOKEN, { username: USER, groups: ["team"], extra: {} });
    f.hub.grantProxy(USER, "mc1", "get", "create");
  });
  after(() => f.close());

  const wait = (what: string, check: () => boolean): Promise<void> =>
    waitUntil(what, () => Promise.resolve(check()), { timeoutMs: 10_000, everyMs: 10 });

  test("a watch has its start line while it runs, and its record when it ends", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    const stream = session.request({ ":path": "/mc1/api/v1/namespaces/ns1/configmaps?watch=1&fake=quiet", ...bearer });
    const [head] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
    assert.equal(head[":status"], 200);
    await wait("the watch's start line", () => f.auditLines.some((l) => l.stage === "start" && l.verb === "watch"));
    const start = f.auditLines.find((l) => l.stage === "start" && l.verb === "watch")!;
    assert.equal(start.user, USER);
    assert.deepEqual(start.groups, ["team"]);
    assert.equal(start.cluster, "mc1");
    assert.equal(start.resource, "configmaps");
    assert.equal(start.namespace, "ns1");
    assert.equal(start.decision, "allow");
    assert.ok(!("code" in start) && !("durationMs" in start));
    assert.ok(!f.audit.some((r) => r.requestID === start.requestID), "no end record while it runs");
    f.endpoint.release();
    stream.resume();
    await once(stream, "end");
    session.close();
    await wait("the watch's record", () => f.audit.some((r) => r.requestID === start.requestID));
    const end = f.audit.find((r) => r.requestID === start.requestID)!;
    assert.equal(end.stage, "end");
    assert.equal(end.code, 200);
    assert.equal(end.verb, "watch");
  });

  test("an exec has its start line while it runs, and its record when it ends", async () => {
    const socket = await f.tlsConnect();
    socket.write(
      `POST /mc1/api/v1/namespaces/ns1/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n`,
    );
    let got = "";
    socket.on("data", (c: Buffer) => (got += c.toString()));
    await wait("the 101", () => got.includes("\r\n\r\n"));
    assert.match(got, /^HTTP\/1.1 101/);
    await wait("the exec's start line", () =>
      f.auditLines.some((l) => l.stage === "start" && l.subresource === "exec"),
    );
    const start = f.auditLines.find((l) => l.stage === "start" && l.subresource === "exec")!;
    assert.equal(start.upgrade, true);
    assert.equal(start.verb, "create");
    assert.equal(start.name, "p");
    assert.ok(!f.audit.some((r) => r.requestID === start.requestID), "no end record while it runs");
    socket.end();
    await once(socket, "close");
    await wait("the exec's record", () => f.audit.some((r) => r.requestID === start.requestID));
    assert.equal(f.audit.find((r) => r.requestID === start.requestID)!.code, 101);
  });

  test("logs -f has a start line too", async () => {
    const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
    const stream = session.request({
      ":path": "/mc1/api/v1/namespaces/ns1/pods/p/log?follow=true&fake=quiet",
      ...bearer,
    });
    await once(stream, "response");
    await wait("the log's start line", () => f.auditLines.some((l) => l.stage === "start" && l.subresource === "log"));
    f.endpoint.release();
    stream.resume();
    await once(stream, "end");
    session.close();
  });

  test("a short request has one line, its record; a refused watch has no start line", async () => {
    const lines = f.auditLines.length;
    assert.equal((await f.request("/mc1/api/v1/namespaces/ns1/configmaps/c", { headers: bearer })).status, 200);
    assert.equal((await f.request("/mc2/api/v1/configmaps?watch=1", { headers: bearer })).status, 403);
    const added = f.auditLines.slice(lines);
    assert.deepEqual(
      added.map((l) => [l.stage, l.verb]),
      [
        ["end", "get"],
        ["end", "watch"],
      ],
    );
  });

  test("fleet-view requests are audited, their 401s too", async () => {
    const lines = f.audit.length;
    assert.equal((await f.request("/-/fleet/api/clusters")).status, 401);
    assert.equal(
      (await f.request("/-/fleet/api/clusters", { headers: { authorization: "Bearer not-a-hub-token" } })).status,
      401,
    );
    assert.equal((await f.request("/-/fleet/api/clusters/mc1?x=1", { headers: bearer })).status, 200);
    await wait("three fleet records", () => f.audit.length >= lines + 3);
    const [none, bad, ok] = f.audit.slice(lines);
    for (const r of [none!, bad!]) {
      assert.equal(r.path, "/-/fleet/api/clusters");
      assert.equal(r.code, 401);
      assert.equal(r.decision, "deny");
      assert.ok(r.reason, "the refusal's reason");
      assert.equal(r.user, undefined);
    }
    assert.equal(ok!.path, "/-/fleet/api/clusters/mc1");
    assert.equal(ok!.code, 200);
    assert.equal(ok!.user, USER);
    assert.equal(ok!.decision, "allow");
    assert.ok(ok!.bytesOut > 0);
    for (const r of f.audit)
      assert.ok(!JSON.stringify(r).includes(TOKEN) && !JSON.stringify(r).includes("not-a-hub-token"));
  });
});
