/**
 * Content relayed from a cluster never runs in the gateway's origin (where the fleet page keeps a
 * hub token): every relayed response carries the sandbox policy and nosniff; the fleet page's own
 * policy and the gateway's own answers are unchanged.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { sandboxedHeaders } from "./response-policy.js";
import { startGatewayFixture, type GatewayFixture } from "./testing/gateway-fixture.js";

const ALICE = "system:serviceaccount:default:alice";
const TOKEN = "alice-token";

describe("response policy", () => {
  test("the sandbox policy joins one the cluster sent; nosniff is set", () => {
    assert.deepEqual(sandboxedHeaders({ "content-type": "text/html" }), {
      "content-type": "text/html",
      "content-security-policy": "sandbox",
      "x-content-type-options": "nosniff",
    });
    assert.equal(
      sandboxedHeaders({ "content-security-policy": "default-src 'self'" })["content-security-policy"],
      "default-src 'self', sandbox",
    );
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
      ["a Service", "/mc1/api/v1/namespaces/web/services/http:app:8080/proxy-service/index.html"],
      ["services/<s>/proxy", "/mc1/api/v1/namespaces/web/services/app:8080/proxy/index.html"],
      ["pods/<p>/proxy", "/mc1/api/v1/namespaces/web/pods/app-1:8080/proxy/index.html"],
      ["nodes/<n>/proxy", "/mc1/api/v1/nodes/node-1/proxy/metrics"],
      ["a kube API answer", "/mc1/api/v1/namespaces/web/pods"],
    ] as const)
      test(`${what}: Content-Security-Policy sandbox and nosniff`, async () => {
        const r = await f.request(path, { headers: { authorization: `Bearer ${TOKEN}` } });
        assert.equal(r.status, 200, r.body);
        assert.equal(r.headers["content-security-policy"], "sandbox");
        assert.doesNotMatch(String(r.headers["content-security-policy"]), /allow-same-origin/);
        assert.equal(r.headers["x-content-type-options"], "nosniff");
      });
  });
});
