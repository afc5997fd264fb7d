import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { silentLogger } from "@cluster-proxy/kit";
import { KubeResources, type KubeObject } from "./kube-api.js";
import { SupervisedWatch } from "./supervised-watch.js";
import { FakeApiServer, type FakeRequest } from "./testing/fake-api-server.js";

const { secret } = KubeResources;
const obj = (name: string, data = "v1"): KubeObject => ({ metadata: { name, namespace: "ns" }, data: { k: data } });
const isList = (r: FakeRequest): boolean => r.method === "GET" && r.path.endsWith("/secrets") && !r.query.has("watch");

/** The faithful fake API server (closed after the test) and the count of its lists. */
async function fakeApi(t: TestContext): Promise<{ server: FakeApiServer; lists: () => number }> {
  const server = await FakeApiServer.start();
  t.after(() => server.close());
  return { server, lists: () => server.requests.filter(isList).length };
}

/** Poll `check` until true, bounded (20 s). */
async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("SupervisedWatch", () => {
  it("re-lists after a failed watch, and reports what changed while it was away", async (t) => {
    const { server, lists } = await fakeApi(t);
    server.put(secret, obj("a"));
    server.put(secret, obj("b"));
    const events: string[] = [];
    const stop = new AbortController();
    t.after(() => stop.abort());
    const watch = new SupervisedWatch(
      server.api(),
      secret,
      {},
      (type, o) => events.push(`${type} ${o.metadata.name}`),
      silentLogger,
    );
    const running = watch.run(stop.signal);
    await until("the first watch", () => server.openWatches() === 1);
    server.put(secret, obj("a", "v2"));
    await until("the watched change", () => events.length === 3);
    // The watch ends and cannot be re-opened (an apiserver restart); meanwhile a, b and c change.
    server.failNext(1, { code: 503, reason: "ServiceUnavailable", message: "restarting" }, (r) => r.query.has("watch"));
    server.closeWatches();
    server.put(secret, obj("a", "v3"));
    server.put(secret, obj("c"));
    server.remove(secret, "b", "ns");
    await until("the watch after the re-list", () => lists() === 2 && server.openWatches() === 1);
    assert.deepEqual(events, ["ADDED a", "ADDED b", "MODIFIED a", "MODIFIED a", "ADDED c", "DELETED b"]);
    assert.deepEqual(
      watch
        .items()
        .map((o) => o.metadata.name)
        .sort(),
      ["a", "c"],
    );
    assert.equal(watch.isSynced(), true);
    assert.equal(watch.restarts, 1);
    stop.abort();
    await running;
  });

  it("re-lists without going unready when the watch's resourceVersion is too old (410 Gone)", async (t) => {
    const { server, lists } = await fakeApi(t);
    server.put(secret, obj("a"));
    const stop = new AbortController();
    t.after(() => stop.abort());
    const watch = new SupervisedWatch(server.api(), secret, {}, () => undefined, silentLogger);
    const syncedAtList: boolean[] = [];
    server.onRequest = (r) => void (isList(r) && syncedAtList.push(watch.isSynced()));
    const running = watch.run(stop.signal);
    await until("the first watch", () => server.openWatches() === 1);
    // History compacted while the watch was closed: re-opened from its resourceVersion, it gets 410.
    server.expire();
    server.closeWatches();
    await until("the second list", () => lists() === 2);
    assert.deepEqual(
      syncedAtList,
      [false, true],
      "an expired watch is routine: the cache stays ready while it re-lists",
    );
    assert.equal(watch.isSynced(), true);
    stop.abort();
    await running;
  });
});
