/**
 * Hop-by-hop headers (kit's list, the agent's too) stop at the gateway both ways: a caller's never
 * reach the cluster's endpoint, nor do those its `Connection` header names; an endpoint's never
 * reach the caller.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { CONNECTION_SPECIFIC_HEADERS, HOP_BY_HOP_HEADERS } from "@cluster-proxy/kit";
import { responseHeaders } from "./relay.js";
import type { EchoBody } from "./testing/fake-endpoint.js";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const ALICE = "system:serviceaccount:default:alice";
const TOKEN = "alice-token";

/**
 * The hop-by-hop headers a caller can send on a plain HTTP/1.1 request without changing its
 * framing or making it an upgrade (Transfer-Encoding and Upgrade are attacked in test/hostile;
 * Node's client sends Trailer only with a chunked body).
 */
const CALLER_HOP_BY_HOP: Record<string, string> = {
  "Keep-Alive": "timeout=5",
  "Proxy-Connection": "keep-alive",
  TE: "trailers",
  "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA",
  "Proxy-Authenticate": 'Basic realm="hub"',
  "Proxy-Authorization": "Basic dXNlcjpwYXNz",
};

describe("hop-by-hop headers at the gateway", () => {
  test("the list: RFC 9110 7.6.1, what HTTP/2 forbids, Trailer and the proxy credentials; Host besides for relays", () => {
    for (const name of [
      "connection",
      "keep-alive",
      "proxy-connection",
      "transfer-encoding",
      "upgrade",
      "te",
      "trailer",
      "http2-settings",
      "proxy-authenticate",
      "proxy-authorization",
    ])
      assert.ok(HOP_BY_HOP_HEADERS.has(name), name);
    assert.deepEqual([...CONNECTION_SPECIFIC_HEADERS].sort(), [...HOP_BY_HOP_HEADERS, "host"].sort());
  });

  test("an answer keeps none of them, whatever its spelling", () => {
    const answer: Record<string, string> = { "content-type": "text/plain", "x-kept": "1" };
    for (const name of CONNECTION_SPECIFIC_HEADERS) answer[name] = "v";
    assert.deepEqual(responseHeaders(answer), { "content-type": "text/plain", "x-kept": "1" });
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
      test(`${what}: no hop-by-hop header of the caller, none its Connection names`, async () => {
        const r = await f.request(path, {
          headers: {
            authorization: `Bearer ${TOKEN}`,
            ...CALLER_HOP_BY_HOP,
            Connection: "keep-alive, X-Hop, X-Also-Hop",
            "X-Hop": "1",
            "X-Also-Hop": "2",
            "X-Kept": "3",
          },
        });
        assert.equal(r.status, 200, r.body);
        const got = (JSON.parse(r.body) as EchoBody).headers;
        for (const name of [...Object.keys(CALLER_HOP_BY_HOP), "Connection", "X-Hop", "X-Also-Hop"])
          assert.equal(got[name.toLowerCase()], undefined, `${name} reached the endpoint`);
        assert.equal(got["x-kept"], "3");
      });

    test("the caller gets none of an endpoint's hop-by-hop headers", async () => {
      f.endpoint.answer = {
        ":status": 200,
        "proxy-authenticate": 'Basic realm="cluster"',
        "proxy-authorization": "Basic dXNlcjpwYXNz",
        trailer: "x-checksum",
        "x-kept": "1",
      };
      const r = await f.request("/mc1/answer", { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(r.status, 200, r.body);
      for (const name of ["proxy-authenticate", "proxy-authorization", "trailer"])
        assert.equal(r.headers[name], undefined, `${name} reached the caller`);
      assert.equal(r.headers["x-kept"], "1");
    });
  });
});
