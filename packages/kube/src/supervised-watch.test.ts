import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KubeApiError, KubeResources, type KubeApi, type KubeObject, type WatchEvent } from "./kube-api.js";
import { silentLogger } from "@cluster-proxy/kit";
import { SupervisedWatch } from "./supervised-watch.js";

const obj = (name: string, rv: string): KubeObject => ({ metadata: { name, namespace: "ns", resourceVersion: rv } });

/** A fake apiserver: scripted lists and watch outcomes. */
function fakeApi(script: {
  lists: KubeObject[][];
  watches: ((emit: (e: WatchEvent) => void) => Promise<void>)[];
  onList?: (n: number) => void;
}) {
  let lists = 0;
  let watches = 0;
  const api = {
    list: () => {
      script.onList?.(lists + 1);
      const items = script.lists[Math.min(lists++, script.lists.length - 1)]!;
      return Promise.resolve({ items, resourceVersion: String(100 + lists) });
    },
    watch: (_r: unknown, _o: unknown, onEvent: (e: WatchEvent) => void, signal: AbortSignal) => {
      const step = script.watches[watches++];
      if (step) return step(onEvent);
      // Nothing scripted: hang until aborted, like an idle watch.
      return new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    },
  };
  return { api: api as unknown as KubeApi, counts: () => ({ lists, watches }) };
}

describe("SupervisedWatch", () => {
  it("re-lists after a failed watch, and reports what changed while it was away", async () => {
    const events: string[] = [];
    const { api, counts } = fakeApi({
      lists: [
        [obj("a", "1"), obj("b", "1")],
        [obj("a", "2"), obj("c", "1")],
      ],
      watches: [
        async (emit) => {
          emit({ type: "MODIFIED", object: obj("a", "1b") });
          await Promise.resolve();
          throw new KubeApiError(0, "Transport", "connection reset");
        },
      ],
    });
    const stop = new AbortController();
    const watch = new SupervisedWatch(
      api,
      KubeResources.secret,
      {},
      (type, o) => events.push(`${type} ${o.metadata.name}`),
      silentLogger,
    );
    const running = watch.run(stop.signal);
    const deadline = Date.now() + 10_000;
    while (counts().watches < 2 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.equal(counts().lists, 2, "listed again after the watch failed");
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

  it("re-lists without going unready when the watch's resourceVersion is too old (410 Gone)", async () => {
    const syncedAtList: boolean[] = [];
    const { api, counts } = fakeApi({
      lists: [[obj("a", "1")]],
      watches: [() => Promise.reject(new KubeApiError(410, "Expired", "too old resource version"))],
      onList: () => syncedAtList.push(watch.isSynced()),
    });
    const stop = new AbortController();
    const watch = new SupervisedWatch(api, KubeResources.secret, {}, () => undefined, silentLogger);
    const running = watch.run(stop.signal);
    const deadline = Date.now() + 10_000;
    while (counts().lists < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
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
