/**
 * KubeApi's options against the faithful fake apiserver: the request timeout (a request not answered
 * in time fails naming it; a watch is not bounded by it), the field manager and the selectors, and a
 * request's signal (the fake's `intercept` stalls or half-answers the requests these need).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { KubeApi, KubeApiError, KubeResources, type WatchEvent } from "./kube-api.js";
import { FakeApiServer } from "./testing/fake-api-server.js";

/** Resolves once `check` holds; fails naming `what` after 10 s. */
async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    assert.ok(Date.now() < deadline, `no ${what} within 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe("KubeApi options", () => {
  let fake: FakeApiServer;
  /** The query of the last request. */
  const lastQuery = (): URLSearchParams => fake.requests.at(-1)!.query;

  before(async () => {
    fake = await FakeApiServer.start();
    // Requests to .../silent are accepted, never answered.
    fake.intercept = (req, _res, serve) => {
      if (!req.path.endsWith("/silent")) serve();
    };
  });
  after(() => fake.close());

  it("a request not answered within requestTimeoutMs fails naming it; a watch outlives it", async () => {
    const api = new KubeApi(fake.kubeConfig(), { requestTimeoutMs: 200 });
    const started = Date.now();
    await assert.rejects(api.request("GET", "/api/v1/silent"), (err: unknown) => {
      assert.ok(err instanceof KubeApiError);
      assert.equal(err.reason, "Timeout");
      assert.match(err.message, /GET \/api\/v1\/silent: no answer within 0\.2 s/);
      return true;
    });
    assert.ok(Date.now() - started < 5_000);
    const listed = await api.list(KubeResources.secret, { namespace: "ns" });
    assert.deepEqual(listed.items, []);
    const events: WatchEvent[] = [];
    const watching = api.watch(
      KubeResources.secret,
      { resourceVersion: listed.resourceVersion },
      (e) => events.push(e),
      new AbortController().signal,
    );
    await until("the watch", () => fake.openWatches() === 1);
    // Its one event comes after longer than the request timeout, then the apiserver ends it.
    await new Promise((resolve) => setTimeout(resolve, 400));
    fake.put(KubeResources.secret, { metadata: { name: "late", namespace: "ns" } });
    fake.closeWatches();
    await watching;
    assert.deepEqual(
      events.map((e) => e.type),
      ["ADDED"],
    );
  });

  it("writes carry the field manager; lists and watches the label and field selectors", async () => {
    const api = new KubeApi(fake.kubeConfig(), { fieldManager: "cluster-proxy-gateway" });
    await api.apply(KubeResources.configMap, { metadata: { name: "x", namespace: "ns" } });
    assert.equal(lastQuery().get("fieldManager"), "cluster-proxy-gateway");
    await api.list(KubeResources.configMap, {
      namespace: "ns",
      labelSelector: "a=b",
      fieldSelector: "metadata.name=x",
    });
    assert.equal(fake.requests.at(-1)!.path, "/api/v1/namespaces/ns/configmaps");
    assert.equal(lastQuery().get("labelSelector"), "a=b");
    assert.equal(lastQuery().get("fieldSelector"), "metadata.name=x");
    const watching = api.watch(
      KubeResources.configMap,
      { namespace: "ns", fieldSelector: "metadata.name=x", resourceVersion: fake.resourceVersion() },
      () => undefined,
      new AbortController().signal,
    );
    await until("the watch", () => fake.openWatches() === 1);
    assert.equal(lastQuery().get("fieldSelector"), "metadata.name=x");
    fake.closeWatches();
    await watching;
    await new KubeApi(fake.kubeConfig()).apply(KubeResources.configMap, { metadata: { name: "x", namespace: "ns" } });
    assert.equal(
      lastQuery().get("fieldManager"),
      "cluster-proxy-addon-manager",
      "the default: the manager every cluster-proxy client has written with",
    );
  });
});

describe("KubeApi request signal", () => {
  it(
    "an aborted request closes its connection, waiting for the answer or reading its body",
    { timeout: 20_000 },
    async () => {
      const fake = await FakeApiServer.start();
      fake.intercept = (req, res) => {
        if (req.path.endsWith("/half")) {
          res.writeHead(200, { "content-type": "application/json" });
          res.write('{"metadata":'); // the rest never comes
        }
        // otherwise: accepted, never answered
      };
      try {
        const api = new KubeApi(fake.kubeConfig(), { requestTimeoutMs: 60_000 });
        const stop = new AbortController();
        const calls = ["/api/v1/silent", "/api/v1/half", "/api/v1/silent"].map((path) =>
          api.request("GET", path, undefined, undefined, stop.signal).then(
            () => undefined,
            (err: unknown) => err,
          ),
        );
        await until("every request", () => fake.requests.length === calls.length);
        stop.abort();
        for (const err of await Promise.all(calls))
          assert.ok(err instanceof KubeApiError && err.reason === "Transport", String(err));
        await fake.connectionsAtMost(0, 5_000);
        await assert.rejects(api.request("GET", "/api/v1/silent", undefined, undefined, stop.signal), KubeApiError);
      } finally {
        await fake.close();
      }
    },
  );
});
