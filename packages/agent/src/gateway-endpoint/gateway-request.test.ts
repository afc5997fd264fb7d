/**
 * The contract's headers read as the agent reads them: targets, refusals, and the headers a
 * request is forwarded with (hop-by-hop and Cluster-Proxy-* removed, the credential of the target).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { CONNECTION_SPECIFIC_HEADERS, HOP_BY_HOP_HEADERS } from "@cluster-proxy/kit";
import { h2ResponseHeaders } from "./gateway-proxy.js";
import {
  forwardedHeaders,
  gatewayTarget,
  headerValues,
  isUpgradeRequest,
  parseServiceTarget,
} from "./gateway-request.js";

const PREFIX = "cluster:hub:";
const refusal = (headers: string[], prefix = PREFIX): string => {
  const t = gatewayTarget(headers, prefix);
  return "refused" in t ? t.refused : "";
};

test("targets and refusals", () => {
  assert.deepEqual(gatewayTarget(["Cluster-Proxy-Target", "kube", "Impersonate-User", "cluster:hub:a"], PREFIX), {
    kind: "kube",
    credential: "impersonate",
  });
  assert.deepEqual(gatewayTarget(["cluster-proxy-target", "Kube", "Cluster-Proxy-Passthrough", "true"], PREFIX), {
    kind: "kube",
    credential: "passthrough",
  });
  assert.match(refusal(["Cluster-Proxy-Target", "kube", "Impersonate-Group", "cluster:hub:g"]), /as the agent itself/);
  assert.match(refusal(["Cluster-Proxy-Target", "kube", "Cluster-Proxy-Target", "kube"]), /given 2 times/);
  assert.match(refusal(["Cluster-Proxy-Target", "service"]), /without a Cluster-Proxy-Service/);
});

test("the agent is the last line: only the gateway's prefixed impersonation, one credential per request", () => {
  const kube = (...more: string[]): string[] => ["Cluster-Proxy-Target", "kube", ...more];
  // What the gateway sends.
  assert.equal(
    refusal(
      kube(
        "Impersonate-User",
        "cluster:hub:system:serviceaccount:default:alice",
        "Impersonate-Group",
        "cluster:hub:system:serviceaccounts",
        "Impersonate-Group",
        "cluster:hub:system:authenticated",
        "Impersonate-Group",
        "system:authenticated",
        "Impersonate-Uid",
        "1234",
        "Impersonate-Extra-Authentication.kubernetes.io%2fcredential-id",
        "JTI=1",
      ),
    ),
    "",
  );
  // Missing, empty or unprefixed users and groups.
  assert.match(refusal(kube()), /without Impersonate-User: refusing to send a request as the agent itself/);
  assert.match(refusal(kube("Impersonate-User", "")), /without Impersonate-User/);
  assert.match(
    refusal(kube("Impersonate-User", "system:admin")),
    /Impersonate-User "system:admin" lacks .*"cluster:hub:"/,
  );
  assert.match(refusal(kube("Impersonate-User", "cluster:hub:")), /lacks/, "the prefix alone names nobody");
  assert.match(refusal(kube("Impersonate-User", "Cluster:Hub:a")), /lacks/, "names are case-sensitive");
  assert.match(
    refusal(kube("Impersonate-User", "cluster:hub:a", "Impersonate-Group", "system:masters")),
    /Impersonate-Group "system:masters" lacks/,
  );
  assert.match(
    refusal(kube("Impersonate-User", "cluster:hub:a", "Impersonate-Group", "cluster:hub:g, system:masters")),
    /Impersonate-Group "system:masters" lacks/,
    "no part of a joined value may be unprefixed",
  );
  assert.match(
    refusal(kube("Impersonate-User", "cluster:hub:a", "Impersonate-User", "cluster:hub:b")),
    /Impersonate-User given 2 times/,
  );
  assert.match(
    refusal(kube("Impersonate-User", "cluster:hub:a", "Impersonate-Uid", "1", "Impersonate-Uid", "2")),
    /Impersonate-Uid given 2 times/,
  );
  assert.match(
    refusal(kube("Impersonate-User", "cluster:hub:a", "Impersonate-Serviceaccount", "x")),
    /unknown impersonation header/,
  );
  assert.match(refusal(kube("Impersonate-Uid", "1")), /without Impersonate-User/);
  assert.match(refusal(kube("Impersonate-Extra-Scopes", "x")), /without Impersonate-User/);
  // The configured prefix is the one checked.
  assert.equal(refusal(kube("Impersonate-User", "hub:a"), "hub:"), "");
  assert.match(
    refusal(kube("Impersonate-User", "cluster:hub:a"), "hub:"),
    /lacks the gateway's impersonation prefix "hub:"/,
  );
  // Pass-through carries no impersonation; a Service neither.
  assert.match(
    refusal(kube("Cluster-Proxy-Passthrough", "true", "Impersonate-User", "cluster:hub:a")),
    /one credential only/,
  );
  assert.match(
    refusal(kube("Cluster-Proxy-Passthrough", "true", "Impersonate-Group", "cluster:hub:g")),
    /one credential only/,
  );
  const service = ["Cluster-Proxy-Target", "service", "Cluster-Proxy-Service", "http://web.apps.svc:80"];
  assert.equal(refusal(service), "");
  assert.match(refusal([...service, "Impersonate-User", "cluster:hub:a"]), /Impersonate-\* headers on a .* service/);
  assert.match(refusal([...service, "Cluster-Proxy-Passthrough", "true"]), /Passthrough on a .* service/);
});

test("the credential is chosen from the end-to-end headers: Connection cannot remove the identity", () => {
  // Connection names Impersonate-User: it never reaches the apiserver, so it cannot choose the
  // agent's token (before: "impersonate", then sent with the agent's token and no identity).
  const smuggled = [
    "Cluster-Proxy-Target",
    "kube",
    "Connection",
    "Impersonate-User",
    "Impersonate-User",
    "cluster:hub:alice",
  ];
  assert.match(refusal(smuggled), /without Impersonate-User: refusing to send a request as the agent itself/);
  assert.match(
    refusal([
      "Cluster-Proxy-Target",
      "kube",
      "Connection",
      "keep-alive, impersonate-user",
      "Impersonate-User",
      "cluster:hub:a",
    ]),
    /without Impersonate-User/,
  );
  // Connection naming Cluster-Proxy-Target: no target at all.
  assert.match(
    refusal([
      "Connection",
      "Cluster-Proxy-Target",
      "Cluster-Proxy-Target",
      "kube",
      "Impersonate-User",
      "cluster:hub:a",
    ]),
    /missing Cluster-Proxy-Target/,
  );
  // Connection naming the pass-through marker on an impersonated request: still impersonated.
  assert.equal(
    refusal([
      "Cluster-Proxy-Target",
      "kube",
      "Connection",
      "Cluster-Proxy-Passthrough",
      "Cluster-Proxy-Passthrough",
      "true",
      "Impersonate-User",
      "cluster:hub:a",
    ]),
    "",
  );
  // Whatever target a caller of forwardedHeaders passes, the agent's token goes only with an identity.
  const out = forwardedHeaders(smuggled, { kind: "kube", credential: "impersonate" }, "api", false, "sa");
  assert.deepEqual(headerValues(out, "impersonate-user"), []);
  assert.deepEqual(headerValues(out, "authorization"), []);
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
    "cluster:hub:alice",
    "Authorization",
    "Bearer caller",
    "Accept",
    "application/json",
  ];
  const kube = gatewayTarget(incoming, PREFIX);
  assert.ok(!("refused" in kube));
  const out = forwardedHeaders(incoming, kube, "10.96.0.1", false, "sa");
  assert.deepEqual(out, [
    "Host",
    "10.96.0.1",
    "Impersonate-User",
    "cluster:hub:alice",
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

/** Caller identity and forwarding headers a caller could set, in the spellings a Service might read. */
const CALLER_CLAIMS = [
  "X-Remote-User",
  "system:admin",
  "x-remote-group",
  "system:masters",
  "X-Remote-Extra-Scopes",
  "all",
  "X-Forwarded-For",
  "203.0.113.66",
  "X-Forwarded-Proto",
  "http",
  "X-Forwarded-Host",
  "evil.example",
  "X-Forwarded-User",
  "admin",
  "Forwarded",
  "for=203.0.113.66;proto=http",
  "X-Real-Ip",
  "203.0.113.66",
  "X-Auth-Request-User",
  "admin",
  "X-Auth-Request-Email",
  "admin@example.com",
  "X-Client-Cert",
  "PEM",
  "X-Client-Ip",
  "203.0.113.66",
  "X-Original-Url",
  "/admin",
  "X-Original-Forwarded-For",
  "203.0.113.66",
  "True-Client-Ip",
  "203.0.113.66",
  "X-Cluster-Client-Ip",
  "203.0.113.66",
  "CF-Connecting-IP",
  "203.0.113.66",
];
const SERVICE = { kind: "service", url: new URL("https://web.apps.svc:8443"), servername: "web.apps.svc" } as const;
const claimNames = (headers: string[]): string[] =>
  [...headers.keys()]
    .filter((i) => i % 2 === 0)
    .map((i) => headers[i]!.toLowerCase())
    .filter((n) =>
      /^(x-remote-|x-forwarded-|forwarded$|x-real-ip$|x-auth-request-|x-client-|x-original-|true-client-ip$|x-cluster-client-ip$|cf-connecting-ip$)/.test(
        n,
      ),
    );

test("before a Service: no caller identity or forwarding header; X-Forwarded-For/-Proto from the contract only", () => {
  const incoming = [
    "Cluster-Proxy-Target",
    "service",
    "Cluster-Proxy-Service",
    "https://web.apps.svc:8443",
    "Cluster-Proxy-Forwarded-For",
    "192.0.2.7",
    "Cluster-Proxy-Forwarded-Proto",
    "https",
    "Authorization",
    "Bearer caller",
    "Impersonate-User",
    "cluster:hub:a",
    "Accept",
    "text/html",
    ...CALLER_CLAIMS,
  ];
  const out = forwardedHeaders(incoming, SERVICE, "web.apps.svc:8443", false, undefined);
  assert.deepEqual(out, [
    "Host",
    "web.apps.svc:8443",
    "Accept",
    "text/html",
    "X-Forwarded-For",
    "192.0.2.7",
    "X-Forwarded-Proto",
    "https",
  ]);
  // IPv6 callers; the proto's case does not matter.
  const v6 = forwardedHeaders(
    ["Cluster-Proxy-Forwarded-For", "2001:db8::7", "Cluster-Proxy-Forwarded-Proto", "HTTP"],
    SERVICE,
    "h",
    false,
    undefined,
  );
  assert.deepEqual(headerValues(v6, "x-forwarded-for"), ["2001:db8::7"]);
  assert.deepEqual(headerValues(v6, "x-forwarded-proto"), ["http"]);
  // Contract values that are not an IP literal / http(s), or given twice, are not passed on.
  for (const bad of [
    ["Cluster-Proxy-Forwarded-For", "evil.example", "Cluster-Proxy-Forwarded-Proto", "gopher"],
    ["Cluster-Proxy-Forwarded-For", "192.0.2.7, 203.0.113.66", "Cluster-Proxy-Forwarded-Proto", "https, http"],
    ["Cluster-Proxy-Forwarded-For", "192.0.2.7", "Cluster-Proxy-Forwarded-For", "203.0.113.66"],
  ]) {
    const o = forwardedHeaders([...bad, ...CALLER_CLAIMS], SERVICE, "h", false, undefined);
    assert.deepEqual(claimNames(o), [], JSON.stringify(bad));
  }
  // Nothing of the contract: no forwarding header at all.
  assert.deepEqual(claimNames(forwardedHeaders(CALLER_CLAIMS, SERVICE, "h", false, undefined)), []);
});

test("before the kube-apiserver: no caller identity or forwarding header either, and no X-Forwarded-* added", () => {
  const incoming = [
    "Cluster-Proxy-Target",
    "kube",
    "Impersonate-User",
    "cluster:hub:a",
    "Cluster-Proxy-Forwarded-For",
    "192.0.2.7",
    ...CALLER_CLAIMS,
  ];
  const target = gatewayTarget(incoming, PREFIX);
  assert.ok(!("refused" in target));
  const out = forwardedHeaders(incoming, target, "api", false, "sa");
  assert.deepEqual(claimNames(out), []);
  assert.deepEqual(out, ["Host", "api", "Impersonate-User", "cluster:hub:a", "Authorization", "Bearer sa"]);
  const passthrough = forwardedHeaders(
    ["Authorization", "Bearer caller", ...CALLER_CLAIMS],
    { kind: "kube", credential: "passthrough" },
    "api",
    false,
    "sa",
  );
  assert.deepEqual(passthrough, ["Host", "api", "Authorization", "Bearer caller"]);
  // An HTTP/2 request's raw headers start with its pseudo-headers: never forwarded as headers.
  const h2 = forwardedHeaders(
    [":method", "GET", ":path", "/api", ":authority", "gw", ":scheme", "https", ...incoming],
    target,
    "api",
    false,
    "sa",
  );
  assert.deepEqual(h2, out);
});

test("every hop-by-hop header of kit's list stops here, as at the gateway; an upgrade keeps its two", () => {
  const kube = { kind: "kube", credential: "impersonate" } as const;
  const incoming = ["Impersonate-User", "cluster:hub:alice", "X-Kept", "1"];
  for (const name of HOP_BY_HOP_HEADERS)
    if (name !== "connection" && name !== "upgrade") incoming.push(name.toUpperCase(), "v");
  incoming.push("Connection", "Upgrade", "Upgrade", "websocket");
  const names = (headers: string[]): string[] => headers.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
  assert.deepEqual(names(forwardedHeaders(incoming, kube, "10.96.0.1", false, "sa")), [
    "host",
    "impersonate-user",
    "x-kept",
    "authorization",
  ]);
  const upgrade = forwardedHeaders(incoming, kube, "10.96.0.1", true, "sa");
  assert.deepEqual(names(upgrade), ["host", "impersonate-user", "x-kept", "upgrade", "connection", "authorization"]);
  assert.deepEqual(headerValues(upgrade, "upgrade"), ["websocket"]);
  assert.deepEqual(headerValues(upgrade, "connection"), ["Upgrade"]);
});

test("an answer going back over HTTP/2 keeps none of them either, nor Host", () => {
  const answer = ["Content-Type", "text/plain"];
  for (const name of CONNECTION_SPECIFIC_HEADERS) answer.push(name, "v");
  assert.deepEqual(h2ResponseHeaders(answer), { "content-type": "text/plain" });
});
