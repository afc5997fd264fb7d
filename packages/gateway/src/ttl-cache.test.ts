/**
 * The expiring cache on an injected clock: an entry lives exactly its lifetime on that clock (no
 * wall-clock time passes here), a 0 lifetime keeps nothing, and a full cache drops its oldest entry.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { TtlCache } from "./ttl-cache.js";

describe("TtlCache", () => {
  test("an entry expires when the injected clock passes its lifetime", async () => {
    const clock = new ManualClock();
    const cache = new TtlCache<string>({ clock });
    let loads = 0;
    const load = (): Promise<string> => Promise.resolve(`v${++loads}`);
    assert.equal(await cache.get("k", load, () => 1_000), "v1");
    clock.advance(999);
    assert.equal(await cache.get("k", load, () => 1_000), "v1", "still within its lifetime");
    assert.equal(cache.peek("k"), "v1");
    clock.advance(1);
    assert.equal(cache.peek("k"), undefined, "expired at its lifetime");
    assert.equal(await cache.get("k", load, () => 1_000), "v2", "loaded again");
    assert.equal(loads, 2);
  });

  test("a 0 lifetime keeps nothing; a full cache drops its oldest entry", () => {
    const clock = new ManualClock();
    const cache = new TtlCache<number>({ clock, maxEntries: 2 });
    cache.set("none", 0, 0);
    assert.equal(cache.peek("none"), undefined);
    cache.set("a", 1, 10);
    cache.set("b", 2, 10);
    cache.set("c", 3, 10);
    assert.deepEqual([cache.peek("a"), cache.peek("b"), cache.peek("c")], [undefined, 2, 3]);
  });
});
