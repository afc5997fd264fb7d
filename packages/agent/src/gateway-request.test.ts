/**
 * The contract's headers read as the agent reads them: targets, refusals, and the headers a
 * request is forwarded with (hop-by-hop and Cluster-Proxy-* removed, the credential of the target).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  forwardedHeaders,
  gatewayTarget,
  headerValues,
  isUpgradeRequest,
  parseServiceTarget,
} from "./gateway-request.js";

test("targets and refusals", () => {
  assert.deepEqual(gatewayTarget(["Cluster-Proxy-Target", "kube", "Impersonate-User", "a"]), {
    kind: "kube",
    credential: "impersonate",
  });
  assert.deepEqual(gatewayTarget(["cluster-proxy-target", "Kube", "Cluster-Proxy-Passthrough", "true"]), {
    kind: "kube",
    credential: "passthrough",
  });
  // An identity wins over pass-through: the agent's token with the Impersonate-* headers.
  assert.deepEqual(
    gatewayTarget(["Cluster-Proxy-Target", "kube", "Cluster-Proxy-Passthrough", "true", "Impersonate-User", "a"]),
    { kind: "kube", credential: "impersonate" },
  );
  assert.match(
    String(Object.values(gatewayTarget(["Cluster-Proxy-Target", "kube", "Impersonate-Group", "g"]))),
    /refusing to send a request as the agent itself/,
  );
  assert.ok("refused" in gatewayTarget(["Cluster-Proxy-Target", "kube", "Cluster-Proxy-Target", "kube"]));
  assert.ok("refused" in gatewayTarget(["Cluster-Proxy-Target", "service"]));
});

test("Cluster-Proxy-Service: <http|https>://<name>.<namespace>.svc:<port> only", () => {
  const ok = parseServiceTarget("https://web.apps.svc:8443");
  assert.ok("url" in ok && ok.url.href === "https://web.apps.svc:8443/" && ok.servername === "web.apps.svc");
  assert.ok("url" in parseServiceTarget("http://a-1.b-2.svc:1/"));
  for (const bad of [
    "https://web.apps.svc:0",
    "https://web.apps.svc:65536",
    "https://web.apps.svc:",
    "https://-web.apps.svc:80",
    "https://web.ap_ps.svc:80",
    "https://u@web.apps.svc:80",
    "https://web.apps.svc:80?x",
    "https://web.apps.svc.cluster.local:80",
    `https://${"a".repeat(64)}.apps.svc:80`,
  ])
    assert.ok("refused" in parseServiceTarget(bad), bad);
});

test("forwarded headers: hop-by-hop and Cluster-Proxy-* gone, one Host, the target's credential", () => {
  const incoming = [
    "Host",
    "gateway",
    "Connection",
    "keep-alive, X-Hop",
    "X-Hop",
    "1",
    "Keep-Alive",
    "timeout=5",
    "TE",
    "trailers",
    "Cluster-Proxy-Target",
    "kube",
    "Impersonate-User",
    "alice",
    "Authorization",
    "Bearer caller",
    "Accept",
    "application/json",
  ];
  const kube = gatewayTarget(incoming);
  assert.ok(!("refused" in kube));
  const out = forwardedHeaders(incoming, kube, "10.96.0.1", false, "sa");
  assert.deepEqual(out, [
    "Host",
    "10.96.0.1",
    "Impersonate-User",
    "alice",
    "Accept",
    "application/json",
    "Authorization",
    "Bearer sa",
  ]);
  const upgrade = [
    "Connection",
    "Upgrade",
    "Upgrade",
    "websocket",
    "Cluster-Proxy-Target",
    "kube",
    "Impersonate-User",
    "a",
  ];
  assert.ok(isUpgradeRequest(upgrade));
  const up = forwardedHeaders(upgrade, { kind: "kube", credential: "impersonate" }, "api", true, "sa");
  assert.deepEqual(headerValues(up, "upgrade"), ["websocket"]);
  assert.deepEqual(headerValues(up, "connection"), ["Upgrade"]);
  const service = forwardedHeaders(
    ["Authorization", "Bearer caller", "Impersonate-User", "a"],
    { kind: "service", url: new URL("https://web.apps.svc:8443"), servername: "web.apps.svc" },
    "web.apps.svc:8443",
    false,
    undefined,
  );
  assert.deepEqual(headerValues(service, "authorization"), []);
});
