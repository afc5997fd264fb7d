import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { KubeApi, KubeApiError, KubeResources, isConflict, isNotFound, type WatchEvent } from "../kube-api.js";
import { FakeApiServer, labelSelector, mergePatch } from "./fake-api-server.js";

const { secret } = KubeResources;

async function started(t: TestContext): Promise<FakeApiServer> {
  const server = await FakeApiServer.start();
  t.after(() => server.close());
  return server;
}

describe("the fake API server's own hooks (the rest is compared with kube-apiserver in test/kube)", () => {
  it("failNext answers the matching requests with the given status, then serves again", async (t) => {
    const server = await started(t);
    const api = server.api();
    server.failNext(2, { code: 503, reason: "ServiceUnavailable", message: "down" }, (r) => r.method === "POST");
    const create = () => api.create(secret, { metadata: { name: "a", namespace: "ns" } });
    for (let i = 0; i < 2; i++)
      await assert.rejects(create(), (err) => err instanceof KubeApiError && err.status === 503);
    assert.ok(isNotFound(await api.get(secret, "a", "ns").catch((err: unknown) => err)), "GETs were not refused");
    await create();
    assert.ok(isConflict(await create().catch((err: unknown) => err)), "AlreadyExists");
  });

  it("expire() answers a watch from before it with 410 Expired; closeWatches() ends open ones cleanly", async (t) => {
    const server = await started(t);
    const api = server.api();
    const before = (await api.list(secret, { namespace: "ns" })).resourceVersion;
    const events: WatchEvent[] = [];
    const open = api.watch(
      secret,
      { namespace: "ns", resourceVersion: before },
      (e) => events.push(e),
      new AbortController().signal,
    );
    server.put(secret, { metadata: { name: "a", namespace: "ns" } });
    const deadline = Date.now() + 10_000;
    while (events.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    server.expire();
    server.closeWatches();
    await open;
    assert.deepEqual(
      events.map((e) => e.type),
      ["ADDED"],
    );
    await assert.rejects(
      api.watch(secret, { namespace: "ns", resourceVersion: before }, () => undefined, new AbortController().signal),
      (err) => err instanceof KubeApiError && err.status === 410 && err.reason === "Expired",
    );
  });

  it("intercept takes a request over (a stall, its own answer) or lets the fake serve it, at once or later", async (t) => {
    const server = await started(t);
    const api = server.api();
    let held: (() => void) | undefined;
    server.intercept = (req, res, serve) => {
      if (req.method === "DELETE") return; // a stall
      if (req.method === "POST") held = serve;
      else if (req.path.endsWith("/teapot")) res.writeHead(418).end();
      else serve();
    };
    const creating = api.create(secret, { metadata: { name: "a", namespace: "ns" } });
    const deadline = Date.now() + 10_000;
    while (!held && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(server.object(secret, "a", "ns"), undefined, "held: not yet created");
    held?.();
    assert.equal((await creating).metadata.name, "a");
    await assert.rejects(
      api.request("GET", "/api/v1/teapot"),
      (err) => err instanceof KubeApiError && err.status === 418,
    );
    const stop = new AbortController();
    const deleting = api.request("DELETE", KubeApi.objectPath(secret, "a", "ns"), {}, undefined, stop.signal);
    while (server.requests.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    stop.abort();
    await assert.rejects(deleting, KubeApiError);
    assert.ok(server.object(secret, "a", "ns"), "the stalled DELETE was never served");
  });

  it("dropWatches cuts the open watches: the client's stream fails", async (t) => {
    const server = await started(t);
    const api = server.api();
    const watching = api.watch(
      secret,
      { namespace: "ns", resourceVersion: server.resourceVersion() },
      () => undefined,
      new AbortController().signal,
    );
    const deadline = Date.now() + 10_000;
    while (server.openWatches() === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    server.dropWatches();
    await assert.rejects(watching);
    assert.equal(server.openWatches(), 0);
  });

  it("label selectors and merge patches follow kubectl and RFC 7386", () => {
    const o = (labels: Record<string, string>) => ({ metadata: { name: "x", labels } });
    const sel = labelSelector("app in (a, b),tier!=db,!legacy,env");
    assert.equal(sel(o({ app: "a", env: "p" })), true);
    assert.equal(sel(o({ app: "c", env: "p" })), false);
    assert.equal(sel(o({ app: "a", env: "p", tier: "db" })), false);
    assert.equal(sel(o({ app: "a", env: "p", legacy: "" })), false);
    assert.equal(sel(o({ app: "a" })), false);
    assert.deepEqual(mergePatch({ a: { b: 1, c: [1] }, d: 1 }, { a: { b: null, c: [2] }, e: 2 }), {
      a: { c: [2] },
      d: 1,
      e: 2,
    });
  });
});
