/**
 * The real HubApi against the faithful fake apiserver (`@cluster-proxy/kube/testing`, plain HTTP on
 * loopback): the requests it sends (TokenReview, SubjectAccessReview, ManagedCluster, ConfigMap list
 * and watch by name, Event, the fleet view's ManagedClusterAddOn list and watch by name) and how it
 * reads the answers (404 is "no such cluster", a watch event updates the listener).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { HubResources } from "@cluster-proxy/api";
import { KubeResources, type KubeObject } from "@cluster-proxy/kube";
import { FAKE_API_AUDIENCE, FakeApiServer } from "@cluster-proxy/kube/testing";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import type { AddOnInfo, HubApi, ListEvent } from "./hub-api.js";
import { kubeHubApi } from "./kube-hub.js";

const { managedCluster, managedClusterAddOn } = HubResources;
const ALICE = { username: "alice", uid: "u1", groups: ["g"], extra: { k: ["v"] } };

describe("kubeHubApi", () => {
  let fake: FakeApiServer;
  let hub: HubApi;
  /** The query of each request to `path`, in order. */
  const queries = (path: string): URLSearchParams[] => fake.requests.filter((r) => r.path === path).map((r) => r.query);
  /** The body of the last request to `path`. */
  const lastBody = (path: string): unknown => fake.requests.filter((r) => r.path === path).at(-1)?.body;

  before(async () => {
    fake = await FakeApiServer.start([managedCluster, { ...managedClusterAddOn, subresources: ["status"] }]);
    // alice's token is for the apiserver and for "gw".
    fake.tokens.set("good", { user: ALICE, audiences: [FAKE_API_AUDIENCE, "gw"] });
    // Only alice may reach mc1's proxy.
    fake.authorize = (spec) =>
      spec.user === "alice" &&
      spec.resourceAttributes?.resource === "managedclusters" &&
      spec.resourceAttributes.subresource === "proxy" &&
      spec.resourceAttributes.name === "mc1";
    fake.put(managedCluster, { metadata: { name: "mc1", labels: { a: "b" } } });
    hub = kubeHubApi(fake.kubeConfig());
  });
  after(() => fake.close());

  test("TokenReview: the user of a recognised token (the apiserver's audience), nothing for another", async () => {
    assert.deepEqual(await hub.tokenReview("good"), {
      user: { ...ALICE, groups: ["g", "system:authenticated"] },
      audiences: [FAKE_API_AUDIENCE],
    });
    assert.deepEqual(await hub.tokenReview("bad"), {});
  });

  test("TokenReview: the audiences asked for go in spec.audiences, status.audiences comes back", async () => {
    assert.deepEqual(await hub.tokenReview("good", ["gw", "other"]), {
      user: { ...ALICE, groups: ["g", "system:authenticated"] },
      audiences: ["gw"],
    });
    assert.deepEqual(await hub.tokenReview("good", ["other"]), {}, "not a token for that audience");
    assert.deepEqual(lastBody("/apis/authentication.k8s.io/v1/tokenreviews"), {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenReview",
      spec: { token: "good", audiences: ["other"] },
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
    assert.deepEqual(fake.accessReviews.at(-1), {
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
    const other = await hub.subjectAccessReview(
      { username: "bob", groups: ["g"], extra: {} },
      {
        group: "cluster.open-cluster-management.io",
        resource: "managedclusters",
        subresource: "proxy",
        name: "mc1",
        verb: "get",
      },
    );
    assert.equal(other.allowed, false);
  });

  test("ManagedCluster: labels of one that exists, undefined for a 404", async () => {
    assert.deepEqual(await hub.managedCluster("mc1"), { name: "mc1", labels: { a: "b" } });
    assert.equal(await hub.managedCluster("nope"), undefined);
  });

  test("the ConfigMap watch delivers the listed state, then the watched change", async () => {
    const { configMap } = KubeResources;
    const svc = (services: string): KubeObject & { data: Record<string, string> } => ({
      metadata: { name: "svc", namespace: "ns" },
      data: { services },
    });
    fake.put(configMap, svc("[]"));
    fake.put(configMap, { metadata: { name: "other", namespace: "ns" }, data: { services: "- other" } });
    const listed = fake.resourceVersion();
    const seen: (Record<string, string> | undefined)[] = [];
    const stop = hub.watchConfigMap("ns", "svc", (data) => seen.push(data));
    try {
      await waitUntil("listed ConfigMap and open watch", () => seen.length === 1 && fake.openWatches() === 1);
      fake.put(configMap, { metadata: { name: "other", namespace: "ns" }, data: { services: "- changed" } });
      fake.put(configMap, svc("- x"));
      await waitUntil("watched change", () => seen.length === 2);
    } finally {
      stop();
    }
    assert.deepEqual(seen, [{ services: "[]" }, { services: "- x" }]);
    // Listed and watched by name (the gateway's Role names the ConfigMap), the watch from the list's version.
    const asked = queries("/api/v1/namespaces/ns/configmaps");
    assert.ok(asked.every((q) => q.get("fieldSelector") === "metadata.name=svc"));
    assert.equal(asked.at(-1)?.get("watch"), "1");
    assert.equal(asked.at(-1)?.get("resourceVersion"), listed);
  });

  test("an Event names the ConfigMap", async () => {
    await hub.configMapEvent("ns", "svc", "InvalidExposedServices", "refused: x");
    const [ev, ...more] = fake.objects<KubeObject & { involvedObject?: unknown; reason?: string; type?: string }>(
      KubeResources.event,
      "ns",
    );
    assert.ok(ev && more.length === 0);
    assert.match(ev.metadata.name, /^svc\./, "named after the ConfigMap");
    assert.deepEqual(ev.involvedObject, { apiVersion: "v1", kind: "ConfigMap", name: "svc", namespace: "ns" });
    assert.equal(ev.reason, "InvalidExposedServices");
    assert.equal(ev.type, "Warning");
  });

  test("the fleet view's ManagedClusterAddOns: listed and watched by name, the Available condition read", async () => {
    const available = {
      type: "Available",
      status: "True",
      reason: "ProxyAgentAvailable",
      message: "tunnel works through 1 of 1 proxy-server (s1)",
      lastTransitionTime: "2026-11-26T20:00:00Z",
    };
    fake.put(managedClusterAddOn, {
      metadata: { name: "cluster-proxy", namespace: "mc1" },
      status: { conditions: [available] },
    });
    fake.put(managedClusterAddOn, { metadata: { name: "cluster-proxy", namespace: "mc2" } });
    fake.put(managedClusterAddOn, { metadata: { name: "another-addon", namespace: "mc1" } });
    const listed = fake.resourceVersion();
    const seen: ListEvent<AddOnInfo>[] = [];
    const path = "/apis/addon.open-cluster-management.io/v1alpha1/managedclusteraddons";
    const stop = hub.watchAddOns("cluster-proxy", (e) => seen.push(e));
    try {
      await waitUntil("listed add-ons and open watch", () => seen.length === 1 && fake.openWatches() === 1);
      fake.remove(managedClusterAddOn, "another-addon", "mc1");
      fake.remove(managedClusterAddOn, "cluster-proxy", "mc2");
      await waitUntil("watched delete", () => seen.length === 2);
    } finally {
      stop();
    }
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
    const asked = queries(path);
    assert.ok(asked.every((q) => q.get("fieldSelector") === "metadata.name=cluster-proxy"));
    assert.equal(asked.at(-1)?.get("watch"), "1");
    assert.equal(asked.at(-1)?.get("resourceVersion"), listed);
  });
});

describe("kubeHubApi against a hub that accepts but does not answer", () => {
  test("a TokenReview or SubjectAccessReview fails at its deadline, naming it, instead of hanging", async () => {
    const fake = await FakeApiServer.start();
    fake.intercept = () => undefined; // accepted, never answered
    try {
      const hub = kubeHubApi(fake.kubeConfig(), undefined, 200);
      const started = Date.now();
      await assert.rejects(hub.tokenReview("t"), /did not answer the TokenReview within 200 ms/);
      await assert.rejects(
        hub.subjectAccessReview({ username: "a", groups: [], extra: {} }, { group: "g", resource: "r", verb: "get" }),
        /did not answer the SubjectAccessReview within 200 ms/,
      );
      assert.ok(Date.now() - started < 5_000);
      assert.equal(fake.tokenReviews.length + fake.accessReviews.length, 0, "nothing was answered");
    } finally {
      await fake.close();
    }
  });
});
