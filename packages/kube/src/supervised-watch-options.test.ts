/**
 * SupervisedWatch's options against the faithful fake apiserver: what the watch lists and watches,
 * with the fake's `intercept` holding a list or cutting a watch where a test needs that moment.
 */
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { KubeResources, type KubeObject } from "./kube-api.js";
import { silentLogger } from "@cluster-proxy/kit";
import { SupervisedWatch } from "./supervised-watch.js";
import { errorMessage } from "@cluster-proxy/errors";
import { FakeApiServer, type FakeRequest } from "./testing/fake-api-server.js";

const { secret } = KubeResources;
const obj = (name: string): KubeObject => ({ metadata: { name, namespace: "ns" } });
const isWatch = (r: FakeRequest): boolean => r.query.get("watch") === "1";

async function started(t: TestContext, ...names: string[]): Promise<FakeApiServer> {
  const fake = await FakeApiServer.start();
  t.after(() => fake.close());
  for (const name of names) fake.put(secret, obj(name));
  return fake;
}

/** The lists and watches `fake` was asked for. */
const counts = (fake: FakeApiServer): { lists: number; watches: number } => {
  const reads = fake.requests.filter((r) => r.method === "GET");
  return { lists: reads.filter((r) => !isWatch(r)).length, watches: reads.filter(isWatch).length };
};

describe("SupervisedWatch options", () => {
  const until = async (what: string, check: () => boolean): Promise<void> => {
    const deadline = Date.now() + 10_000;
    while (!check()) {
      assert.ok(Date.now() < deadline, `no ${what} within 10 s`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };

  it("onList: each (re)list is reported whole, and the handler gets the watch's events only", async (t) => {
    const fake = await started(t, "a", "b");
    const lists: string[][] = [];
    const events: string[] = [];
    const stop = new AbortController();
    const watch = new SupervisedWatch(
      fake.api(),
      secret,
      { onList: (items) => lists.push(items.map((o) => o.metadata.name)), retry: { initialMs: 1, capMs: 1 } },
      (type, o) => events.push(`${type} ${o.metadata.name}`),
      silentLogger,
    );
    const running = watch.run(stop.signal);
    await until("the watch", () => fake.openWatches() === 1);
    fake.put(secret, obj("c"));
    await until("the watched ADDED", () => events.length === 1);
    // The watch's connection is cut; while the re-list waits, b and c go.
    let release: () => void = () => undefined;
    fake.intercept = (req, _res, serve) => {
      if (isWatch(req)) return serve();
      release = serve;
      fake.intercept = undefined;
    };
    fake.dropWatches();
    await until("the re-list", () => counts(fake).lists === 2);
    fake.remove(secret, "b", "ns");
    fake.remove(secret, "c", "ns");
    release();
    await until("the second watch", () => fake.openWatches() === 1 && lists.length === 2);
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

  it("relistWhenWatchEnds: a watch the server ends is followed by a list, not by a watch from the last version", async (t) => {
    const plain = await started(t, "a");
    const relisting = await started(t, "a");
    const stop = new AbortController();
    const runs = [
      new SupervisedWatch(plain.api(), secret, {}, () => undefined, silentLogger).run(stop.signal),
      new SupervisedWatch(relisting.api(), secret, { relistWhenWatchEnds: true }, () => undefined, silentLogger).run(
        stop.signal,
      ),
    ];
    await until("both watches", () => plain.openWatches() === 1 && relisting.openWatches() === 1);
    // The apiserver ends the watches (their timeout).
    plain.closeWatches();
    relisting.closeWatches();
    await until("both watches again", () => counts(plain).watches === 2 && counts(relisting).watches === 2);
    await until("both open", () => plain.openWatches() === 1 && relisting.openWatches() === 1);
    assert.deepEqual(counts(plain), { lists: 1, watches: 2 });
    assert.deepEqual(counts(relisting), { lists: 2, watches: 2 });
    stop.abort();
    await Promise.all(runs);
  });

  it("onFailure gets each failed list or watch and the pause, which retry bounds", async (t) => {
    const fake = await started(t, "a");
    const failures: [string, number][] = [];
    const stop = new AbortController();
    const watch = new SupervisedWatch(
      fake.api(),
      secret,
      { retry: { initialMs: 40, capMs: 40 }, onFailure: (err, ms) => failures.push([errorMessage(err), ms]) },
      () => undefined,
      silentLogger,
    );
    const running = watch.run(stop.signal);
    await until("the watch", () => fake.openWatches() === 1);
    // The next watch (after the re-list) starts from a version the apiserver no longer has: 410 Gone.
    fake.intercept = (req, _res, serve) => {
      if (isWatch(req)) {
        fake.intercept = undefined;
        fake.expire();
      }
      serve();
    };
    fake.dropWatches();
    await until("the third watch", () => counts(fake).watches === 3 && fake.openWatches() === 1);
    assert.equal(failures.length, 1, `a 410 Gone is routine: not a failure (${JSON.stringify(failures)})`);
    assert.match(failures[0]![0], /aborted|socket hang up|ECONNRESET/);
    assert.ok(failures[0]![1] >= 20 && failures[0]![1] <= 40, `paused ${failures[0]![1]} ms`);
    assert.deepEqual(counts(fake), { lists: 3, watches: 3 }, "each failure and the 410 re-list");
    stop.abort();
    await running;
  });

  it("reports nothing of a list that answers after the signal aborted", async (t) => {
    const fake = await started(t, "a");
    const stop = new AbortController();
    const events: string[] = [];
    fake.intercept = (_req, _res, serve) => {
      stop.abort();
      serve();
    };
    const watch = new SupervisedWatch(
      fake.api(),
      secret,
      {},
      (type, o) => events.push(`${type} ${o.metadata.name}`),
      silentLogger,
    );
    await watch.run(stop.signal);
    assert.deepEqual(events, []);
    assert.equal(watch.isSynced(), false);
    assert.equal(counts(fake).lists, 1, "the list was sent");
  });
});
