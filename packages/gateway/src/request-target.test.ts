/** URL parsing (a table, hostile inputs included) and the kube verb of a request. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { kubeRequestInfo } from "./request-info.js";
import { parseRequestTarget } from "./request-target.js";

describe("parseRequestTarget", () => {
  const ok: [string, unknown][] = [
    ["/mc1", { kind: "kube", cluster: "mc1", path: "/", query: "" }],
    ["/mc1/", { kind: "kube", cluster: "mc1", path: "/", query: "" }],
    ["/mc1/api/v1/pods?watch=1&x=%2F", { kind: "kube", cluster: "mc1", path: "/api/v1/pods", query: "?watch=1&x=%2F" }],
    [
      "/7staging/apis/apps/v1/namespaces/a/deployments/b",
      { kind: "kube", cluster: "7staging", path: "/apis/apps/v1/namespaces/a/deployments/b", query: "" },
    ],
    [
      "/mc1/api/v1/namespaces/mon/services/grafana:3000/proxy-service/a/b?c=d",
      {
        kind: "service",
        cluster: "mc1",
        namespace: "mon",
        service: "grafana",
        scheme: "https",
        port: 3000,
        path: "/a/b",
        query: "?c=d",
      },
    ],
    [
      "/mc1/api/v1/namespaces/mon/services/http:grafana:80/proxy-service",
      {
        kind: "service",
        cluster: "mc1",
        namespace: "mon",
        service: "grafana",
        scheme: "http",
        port: 80,
        path: "/",
        query: "",
      },
    ],
    // A Service proxy path of the apiserver itself (services/<x>/proxy) is a kube request.
    [
      "/mc1/api/v1/namespaces/mon/services/web:80/proxy/",
      { kind: "kube", cluster: "mc1", path: "/api/v1/namespaces/mon/services/web:80/proxy/", query: "" },
    ],
  ];
  for (const [url, want] of ok)
    test(`accepts ${url}`, () => assert.deepEqual(parseRequestTarget(url), { ok: true, target: want }));

  const refused = [
    "",
    "*",
    "http://evil/mc1/api",
    "/",
    "//mc1/api",
    "/MC1/api",
    "/mc_1/api",
    "/-mc1/api",
    `/${"a".repeat(64)}/api`,
    "/mc1/../mc2/api",
    "/mc1/api/./v1",
    "/mc1/api/%2e%2E/x",
    "/mc1/api%2Fv1",
    "/mc1/api%5cv1",
    "/mc1/a//b",
    "/mc1/api/%0d%0aX-Injected:1",
    "/mc1/api/%zz",
    "/mc1/api/v1/namespaces/mon/services/grafana/proxy-service/",
    "/mc1/api/v1/namespaces/mon/services/grafana:http/proxy-service/",
    "/mc1/api/v1/namespaces/mon/services/ftp:grafana:21/proxy-service/",
    "/mc1/api/v1/namespaces/mon/services/grafana:70000/proxy-service/",
    "/mc1/api/v1/namespaces/Mon/services/grafana:80/proxy-service/",
    "/mc1/api/v1/namespaces/mon/proxy-service/x",
  ];
  for (const url of refused)
    test(`refuses ${JSON.stringify(url)}`, () => {
      const r = parseRequestTarget(url);
      assert.equal(r.ok, false);
      assert.ok(!r.ok && !r.problem.includes("\n"));
    });
});

describe("kubeRequestInfo", () => {
  const cases: [string, string, string, Record<string, string | undefined>][] = [
    ["GET", "/api/v1/namespaces/a/pods", "", { verb: "list", resource: "pods", namespace: "a" }],
    ["GET", "/api/v1/namespaces/a/pods", "?watch=true", { verb: "watch", resource: "pods", namespace: "a" }],
    ["GET", "/api/v1/watch/namespaces/a/pods", "", { verb: "watch", resource: "pods", namespace: "a" }],
    ["GET", "/api/v1/namespaces/a/pods/p", "", { verb: "get", resource: "pods", namespace: "a", name: "p" }],
    ["HEAD", "/api/v1/nodes/n1", "", { verb: "get", resource: "nodes", name: "n1" }],
    [
      "POST",
      "/api/v1/namespaces/a/pods/p/exec",
      "?command=sh",
      { verb: "create", resource: "pods", name: "p", subresource: "exec" },
    ],
    [
      "PUT",
      "/apis/apps/v1/namespaces/a/deployments/d/scale",
      "",
      { verb: "update", resource: "deployments", subresource: "scale" },
    ],
    ["PATCH", "/apis/apps/v1/namespaces/a/deployments/d", "", { verb: "patch", resource: "deployments", name: "d" }],
    ["DELETE", "/api/v1/namespaces/a/pods/p", "", { verb: "delete", name: "p" }],
    ["DELETE", "/api/v1/namespaces/a/pods", "", { verb: "deletecollection", resource: "pods" }],
    ["GET", "/api/v1/namespaces/a", "", { verb: "get", resource: "namespaces", name: "a", namespace: "a" }],
    ["GET", "/version", "", { verb: "get", resource: undefined }],
    ["GET", "/apis", "", { verb: "get", resource: undefined }],
  ];
  for (const [method, path, query, want] of cases)
    test(`${method} ${path}${query}`, () => {
      const info = kubeRequestInfo(method, path, query);
      for (const [k, v] of Object.entries(want)) assert.equal(info[k as keyof typeof info], v, k);
    });
});
