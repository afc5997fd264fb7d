/**
 * The real HubApi against a stand-in apiserver on loopback (plain HTTP): the requests it sends
 * (TokenReview, SubjectAccessReview, ManagedCluster, ConfigMap list and watch by name, Event, the fleet
 * view's ManagedClusterAddOn list and watch by name) and how it reads the answers (404 is "no such
 * cluster", a watch event updates the listener).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import type { AddOnInfo, HubApi, ListEvent } from "./hub-api.js";
import { kubeHubApi } from "./kube-hub.js";

describe("kubeHubApi", () => {
  let server: http.Server;
  let hub: HubApi;
  const bodies: Record<string, unknown> = {};
  let watchResponse: http.ServerResponse | undefined;
  let addOnWatch: http.ServerResponse | undefined;
  const addOnQueries: string[] = [];
  const configMapQueries: string[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://x");
      let raw = "";
      req.on("data", (c: Buffer) => (raw += c.toString()));
      req.on("end", () => {
        const json = (status: number, body: unknown): void => {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(JSON.stringify(body));
        };
        if (raw) bodies[url.pathname] = JSON.parse(raw);
        switch (url.pathname) {
          case "/apis/authentication.k8s.io/v1/tokenreviews": {
            const spec = (bodies[url.pathname] as { spec: { token: string; audiences?: string[] } }).spec;
            return json(201, {
              status:
                spec.token === "good"
                  ? {
                      authenticated: true,
                      user: { username: "alice", uid: "u1", groups: ["g"], extra: { k: ["v"] } },
                      ...(spec.audiences ? { audiences: spec.audiences.filter((a) => a === "gw") } : {}),
                    }
                  : { authenticated: false },
            });
          }
          case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            return json(201, { status: { allowed: true } });
          case "/apis/cluster.open-cluster-management.io/v1/managedclusters/mc1":
            return json(200, { metadata: { name: "mc1", labels: { a: "b" } } });
          case "/api/v1/namespaces/ns/configmaps":
            configMapQueries.push(url.search);
            if (url.searchParams.get("watch")) {
              res.writeHead(200, { "content-type": "application/json" });
              res.write(
                `${JSON.stringify({ type: "MODIFIED", object: { metadata: { name: "svc" }, data: { services: "- x" } } })}\n`,
              );
              watchResponse = res;
              return;
            }
            return json(200, {
              metadata: { resourceVersion: "7" },
              items: [{ metadata: { name: "svc", resourceVersion: "7" }, data: { services: "[]" } }],
            });
          case "/apis/addon.open-cluster-management.io/v1alpha1/managedclusteraddons":
            addOnQueries.push(url.search);
            if (url.searchParams.get("watch")) {
              res.writeHead(200, { "content-type": "application/json" });
              const gone = { metadata: { name: "cluster-proxy", namespace: "mc2" } };
              res.write(`${JSON.stringify({ type: "DELETED", object: gone })}\n`);
              addOnWatch = res;
              return;
            }
            return json(200, {
              metadata: { resourceVersion: "42" },
              items: [
                {
                  metadata: { name: "cluster-proxy", namespace: "mc1" },
                  status: {
                    conditions: [
                      {
                        type: "Available",
                        status: "True",
                        reason: "ProxyAgentAvailable",
                        message: "tunnel works through 1 of 1 proxy-server (s1)",
                        lastTransitionTime: "2026-11-26T20:00:00Z",
                      },
                    ],
                  },
                },
                { metadata: { name: "cluster-proxy", namespace: "mc2" } },
              ],
            });
          case "/api/v1/namespaces/ns/events":
            return json(201, bodies[url.pathname]);
          default:
            return json(404, { kind: "Status", code: 404 });
        }
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        { name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true },
      ],
      users: [{ name: "u", token: "hub" }],
      contexts: [{ name: "ctx", cluster: "c", user: "u" }],
      currentContext: "ctx",
    });
    hub = kubeHubApi(kc);
  });
  after(() => {
    watchResponse?.end();
    addOnWatch?.end();
    server.closeAllConnections();
    server.close();
  });

  test("TokenReview: the user of a recognised token, nothing for another", async () => {
    assert.deepEqual(await hub.tokenReview("good"), {
      user: { username: "alice", uid: "u1", groups: ["g"], extra: { k: ["v"] } },
    });
    assert.deepEqual(await hub.tokenReview("bad"), {});
  });

  test("TokenReview: the audiences asked for go in spec.audiences, status.audiences comes back", async () => {
    assert.deepEqual(await hub.tokenReview("good", ["gw", "other"]), {
      user: { username: "alice", uid: "u1", groups: ["g"], extra: { k: ["v"] } },
      audiences: ["gw"],
    });
    assert.deepEqual(bodies["/apis/authentication.k8s.io/v1/tokenreviews"], {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenReview",
      spec: { token: "good", audiences: ["gw", "other"] },
    });
  });

  test("SubjectAccessReview carries the whole identity and the resource attributes", async () => {
    const r = await hub.subjectAccessReview(
      { username: "alice", uid: "u1", groups: ["g"], extra: { k: ["v"] } },
      {
        group: "cluster.open-cluster-management.io",
        resource: "managedclusters",
        subresource: "proxy",
        name: "mc1",
        verb: "get",
      },
    );
    assert.equal(r.allowed, true);
    const body = bodies["/apis/authorization.k8s.io/v1/subjectaccessreviews"] as { spec: Record<string, unknown> };
    assert.deepEqual(body.spec, {
      user: "alice",
      groups: ["g"],
      uid: "u1",
      extra: { k: ["v"] },
      resourceAttributes: {
        group: "cluster.open-cluster-management.io",
        resource: "managedclusters",
        subresource: "proxy",
        name: "mc1",
        verb: "get",
      },
    });
  });

  test("ManagedCluster: labels of one that exists, undefined for a 404", async () => {
    assert.deepEqual(await hub.managedCluster("mc1"), { name: "mc1", labels: { a: "b" } });
    assert.equal(await hub.managedCluster("nope"), undefined);
  });

  test("the ConfigMap watch delivers the listed state, then the watched change", async () => {
    const seen: (Record<string, string> | undefined)[] = [];
    let wake: () => void = () => undefined;
    const stop = hub.watchConfigMap("ns", "svc", (data) => {
      seen.push(data);
      wake();
    });
    while (seen.length < 2) await new Promise<void>((r) => (wake = r));
    stop();
    assert.deepEqual(seen, [{ services: "[]" }, { services: "- x" }]);
    // Listed and watched by name (the gateway's Role names the ConfigMap), the watch from the list's version.
    assert.ok(configMapQueries.every((q) => new URLSearchParams(q).get("fieldSelector") === "metadata.name=svc"));
    assert.equal(new URLSearchParams(configMapQueries.at(-1)).get("resourceVersion"), "7");
  });

  test("an Event names the ConfigMap", async () => {
    await hub.configMapEvent("ns", "svc", "InvalidExposedServices", "refused: x");
    const ev = bodies["/api/v1/namespaces/ns/events"] as { involvedObject: unknown; reason: string; type: string };
    assert.deepEqual(ev.involvedObject, { apiVersion: "v1", kind: "ConfigMap", name: "svc", namespace: "ns" });
    assert.equal(ev.reason, "InvalidExposedServices");
    assert.equal(ev.type, "Warning");
  });

  test("the fleet view's ManagedClusterAddOns: listed and watched by name, the Available condition read", async () => {
    const seen: ListEvent<AddOnInfo>[] = [];
    let wake: () => void = () => undefined;
    const stop = hub.watchAddOns("cluster-proxy", (e) => {
      seen.push(e);
      wake();
    });
    while (seen.length < 2) await new Promise<void>((r) => (wake = r));
    stop();
    assert.deepEqual(seen, [
      {
        kind: "list",
        items: [
          {
            cluster: "mc1",
            available: {
              status: "True",
              reason: "ProxyAgentAvailable",
              message: "tunnel works through 1 of 1 proxy-server (s1)",
              lastTransitionTime: "2026-11-26T20:00:00Z",
            },
          },
          { cluster: "mc2" },
        ],
      },
      { kind: "delete", name: "mc2" },
    ]);
    assert.ok(addOnQueries.every((q) => new URLSearchParams(q).get("fieldSelector") === "metadata.name=cluster-proxy"));
    assert.equal(new URLSearchParams(addOnQueries.at(-1)).get("resourceVersion"), "42");
  });
});

describe("kubeHubApi against a hub that accepts but does not answer", () => {
  test("a TokenReview or SubjectAccessReview fails at its deadline, naming it, instead of hanging", async () => {
    const server = http.createServer(() => undefined);
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    try {
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [
          { name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true },
        ],
        users: [{ name: "u", token: "hub" }],
        contexts: [{ name: "ctx", cluster: "c", user: "u" }],
        currentContext: "ctx",
      });
      const hub = kubeHubApi(kc, undefined, 200);
      const started = Date.now();
      await assert.rejects(hub.tokenReview("t"), /did not answer the TokenReview within 200 ms/);
      await assert.rejects(
        hub.subjectAccessReview({ username: "a", groups: [], extra: {} }, { group: "g", resource: "r", verb: "get" }),
        /did not answer the SubjectAccessReview within 200 ms/,
      );
      assert.ok(Date.now() - started < 5_000);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
