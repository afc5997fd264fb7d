import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KubeApiError, KubeResources, type KubeApi, type KubeObject, type WatchEvent } from "./kube-api.js";
import { silentLogger } from "@cluster-proxy/kit";
import { SupervisedWatch } from "./supervised-watch.js";
import { errorMessage } from "@cluster-proxy/errors";

const obj = (name: string, rv: string): KubeObject => ({ metadata: { name, namespace: "ns", resourceVersion: rv } });

/** Scripted lists and watch outcomes, for the options whose timing the faithful fake cannot script. */
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

describe("SupervisedWatch options", () => {
  const until = async (check: () => boolean): Promise<void> => {
    const deadline = Date.now() + 10_000;
    while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  };

  it("onList: each (re)list is reported whole, and the handler gets the watch's events only", async () => {
    const lists: string[][] = [];
    const events: string[] = [];
    const { api, counts } = fakeApi({
      lists: [[obj("a", "1"), obj("b", "1")], [obj("a", "1")]],
      watches: [
        async (emit) => {
          emit({ type: "ADDED", object: obj("c", "1") });
          await Promise.resolve();
          throw new KubeApiError(0, "Transport", "connection reset");
        },
      ],
    });
    const stop = new AbortController();
    const watch = new SupervisedWatch(
      api,
      KubeResources.secret,
      { onList: (items) => lists.push(items.map((o) => o.metadata.name)), retry: { initialMs: 1, capMs: 1 } },
      (type, o) => events.push(`${type} ${o.metadata.name}`),
      silentLogger,
    );
    const running = watch.run(stop.signal);
    await until(() => counts().watches >= 2);
    assert.deepEqual(lists, [["a", "b"], ["a"]]);
    assert.deepEqual(events, ["ADDED c"], "no ADDED/DELETED for what a re-list changed");
    assert.deepEqual(
      watch.items().map((o) => o.metadata.name),
      ["a"],
      "the cache is the last list",
    );
    stop.abort();
    await running;
  });

  it("relistWhenWatchEnds: a watch the server ends is followed by a list, not by a watch from the last version", async () => {
    const ended = (): Promise<void> => Promise.resolve();
    const { api: plain, counts: plainCounts } = fakeApi({ lists: [[obj("a", "1")]], watches: [ended] });
    const { api: relisting, counts } = fakeApi({ lists: [[obj("a", "1")]], watches: [ended] });
    const stop = new AbortController();
    const runs = [
      new SupervisedWatch(plain, KubeResources.secret, {}, () => undefined, silentLogger).run(stop.signal),
      new SupervisedWatch(
        relisting,
        KubeResources.secret,
        { relistWhenWatchEnds: true },
        () => undefined,
        silentLogger,
      ).run(stop.signal),
    ];
    await until(() => plainCounts().watches >= 2 && counts().watches >= 2);
    assert.deepEqual(plainCounts(), { lists: 1, watches: 2 });
    assert.deepEqual(counts(), { lists: 2, watches: 2 });
    stop.abort();
    await Promise.all(runs);
  });

  it("onFailure gets each failed list or watch and the pause, which retry bounds", async () => {
    const failures: [string, number][] = [];
    const { api, counts } = fakeApi({
      lists: [[obj("a", "1")]],
      watches: [
        () => Promise.reject(new KubeApiError(0, "Transport", "connection reset")),
        () => Promise.reject(new KubeApiError(410, "Expired", "too old resource version")),
      ],
    });
    const stop = new AbortController();
    const watch = new SupervisedWatch(
      api,
      KubeResources.secret,
      { retry: { initialMs: 40, capMs: 40 }, onFailure: (err, ms) => failures.push([errorMessage(err), ms]) },
      () => undefined,
      silentLogger,
    );
    const running = watch.run(stop.signal);
    await until(() => counts().watches >= 3);
    assert.equal(failures.length, 1, "a 410 Gone is routine: not a failure");
    assert.equal(failures[0]![0], "connection reset");
    assert.ok(failures[0]![1] >= 20 && failures[0]![1] <= 40, `paused ${failures[0]![1]} ms`);
    stop.abort();
    await running;
  });

  it("reports nothing of a list that answers after the signal aborted", async () => {
    const stop = new AbortController();
    const events: string[] = [];
    const { api } = fakeApi({ lists: [[obj("a", "1")]], watches: [], onList: () => stop.abort() });
    const watch = new SupervisedWatch(
      api,
      KubeResources.secret,
      {},
      (type, o) => events.push(`${type} ${o.metadata.name}`),
      silentLogger,
    );
    await watch.run(stop.signal);
    assert.deepEqual(events, []);
    assert.equal(watch.isSynced(), false);
  });
});
