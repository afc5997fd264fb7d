/**
 * Caller-set identity and forwarding headers never reach a cluster; the gateway's contract headers
 * carry the caller's address and scheme instead (unit, then through a running gateway to a Service
 * and to the kube-apiserver).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { isCallerClaimHeader } from "@cluster-proxy/kit";
import { callerAddress, withForwarding } from "./forwarding-headers.js";
import type { EchoBody } from "./testing/fake-endpoint.js";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const ALICE = "system:serviceaccount:default:alice";
const TOKEN = "alice-token";

/** What a caller might send to pose as someone, or as coming from somewhere, else. */
const SPOOFED: Record<string, string> = {
  "X-Remote-User": "system:admin",
  "X-Remote-Group": "system:masters",
  "X-Remote-Extra-Scopes": "all",
  "X-Forwarded-For": "10.0.0.1",
  "X-Forwarded-Proto": "http",
  "X-Forwarded-Host": "internal.example",
  "X-Forwarded-User": "admin",
  "X-Forwarded-Email": "admin@example.com",
  Forwarded: "for=10.0.0.1;proto=http",
  "X-Real-Ip": "10.0.0.1",
  "X-Auth-Request-User": "admin",
  "X-Auth-Request-Email": "admin@example.com",
  "X-Client-Cert": "forged",
  "X-Client-Ip": "10.0.0.1",
  "X-Original-Url": "/admin",
  "X-Original-Forwarded-For": "10.0.0.1",
  "Cluster-Proxy-Forwarded-For": "10.0.0.1",
  "Cluster-Proxy-Forwarded-Proto": "http",
};

describe("forwarding headers", () => {
  test("which headers are the gateway's to set", () => {
    for (const name of Object.keys(SPOOFED).filter((n) => !n.startsWith("Cluster-")))
      assert.equal(isCallerClaimHeader(name.toLowerCase()), true, name);
    for (const name of ["accept", "content-type", "x-request-id", "user-agent", "x-remotely"])
      assert.equal(isCallerClaimHeader(name), false, name);
  });

  test("the caller's address is an IP literal; IPv4-mapped IPv6 becomes IPv4", () => {
    assert.equal(callerAddress("::ffff:192.0.2.7"), "192.0.2.7");
    assert.equal(callerAddress("2001:db8::1"), "2001:db8::1");
    assert.equal(callerAddress("198.51.100.1"), "198.51.100.1");
    assert.equal(callerAddress(undefined), undefined);
    assert.equal(callerAddress("not-an-ip"), undefined);
    assert.deepEqual(withForwarding({ accept: "*/*", "x-forwarded-for": "10.0.0.1" }, undefined), {
      accept: "*/*",
      "cluster-proxy-forwarded-proto": "https",
    });
  });

  describe("through the gateway", () => {
    let f: GatewayFixture;
    before(async () => {
      f = await startGatewayFixture();
      f.hub.tokens.set(TOKEN, { username: ALICE, groups: [], extra: {} });
      f.hub.grantProxy(ALICE, "mc1", "get");
      f.hub.setConfigMap({ services: "- clusters: [mc1]\n  namespace: web\n  service: app\n" });
    });
    after(() => f.close());

    for (const [what, path] of [
      ["a Service", "/mc1/api/v1/namespaces/web/services/http:app:8080/proxy-service/whoami"],
      ["the kube-apiserver", "/mc1/api/v1/namespaces/web/pods"],
    ] as const)
      test(`${what} never sees a caller's X-Remote-User or X-Forwarded-For, only the contract headers`, async () => {
        const r = await f.request(path, { headers: { authorization: `Bearer ${TOKEN}`, ...SPOOFED } });
        assert.equal(r.status, 200, r.body);
        const got = (JSON.parse(r.body) as EchoBody).headers;
        for (const name of Object.keys(SPOOFED).filter((n) => !n.startsWith("Cluster-")))
          assert.equal(got[name.toLowerCase()], undefined, `${name} reached the endpoint`);
        assert.equal(got["cluster-proxy-forwarded-for"], "127.0.0.1");
        assert.equal(got["cluster-proxy-forwarded-proto"], "https");
      });

    test("over HTTP/2 too: the caller's headers are gone, the contract headers and the sandbox policy are there", async () => {
      const session = http2.connect(`https://127.0.0.1:${f.port}`, { ca: f.servingCa, servername: "localhost" });
      try {
        const stream = session.request({
          ":path": "/mc1/api/v1/namespaces/web/services/http:app:8080/proxy-service/whoami",
          authorization: `Bearer ${TOKEN}`,
          "x-remote-user": "system:admin",
          "x-forwarded-for": "10.0.0.1",
        });
        const [head] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
        let body = "";
        stream.on("data", (c: Buffer) => (body += c.toString()));
        await once(stream, "end");
        assert.equal(head[":status"], 200, body);
        assert.equal(head["content-security-policy"], "sandbox");
        const got = (JSON.parse(body) as EchoBody).headers;
        assert.equal(got["x-remote-user"], undefined);
        assert.equal(got["x-forwarded-for"], undefined);
        assert.equal(got["cluster-proxy-forwarded-for"], "127.0.0.1");
      } finally {
        session.close();
      }
    });
  });
});
