import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SharedAbort, SharedCalls } from "./shared-abort.js";

describe("SharedAbort", () => {
  it("aborts once every waiter's signal has, with the last one's reason", () => {
    const shared = new SharedAbort();
    const a = new AbortController();
    const b = new AbortController();
    shared.join(a.signal);
    shared.join(b.signal);
    a.abort(new Error("a"));
    assert.equal(shared.signal.aborted, false, "b still waits");
    b.abort(new Error("b"));
    assert.equal(shared.signal.aborted, true);
    assert.deepEqual(shared.signal.reason, new Error("b"));
  });

  it("never aborts while a waiter without a signal waits", () => {
    const shared = new SharedAbort();
    const a = new AbortController();
    shared.join(a.signal);
    shared.join(undefined);
    a.abort();
    assert.equal(shared.signal.aborted, false);
  });

  it("aborts at once when its only waiter joined with an aborted signal", () => {
    const shared = new SharedAbort();
    shared.join(AbortSignal.abort(new Error("late")));
    assert.equal(shared.signal.aborted, true);
  });
});

describe("SharedCalls", () => {
  it("runs one call per key, joined by the requests asking meanwhile, and forgets it once settled", async () => {
    const calls = new SharedCalls<string>();
    let started = 0;
    let finish: (v: string) => void = () => undefined;
    const a = new AbortController();
    const b = new AbortController();
    assert.equal(calls.join("k", a.signal), undefined, "nothing runs yet");
    const first = calls.start("k", a.signal, () => {
      started++;
      return new Promise<string>((resolve) => (finish = resolve));
    });
    const second = calls.join("k", b.signal);
    assert.equal(second, first, "the second request shares the call");
    a.abort();
    finish("done");
    assert.equal(await first, "done");
    assert.equal(started, 1);
    assert.equal(calls.join("k", undefined), undefined, "a settled call is forgotten");
  });

  it("aborts the call's signal once every request waiting for it gave up", () => {
    const calls = new SharedCalls<void>();
    let signal: AbortSignal | undefined;
    const a = new AbortController();
    const b = new AbortController();
    void calls.start("k", a.signal, (s) => {
      signal = s;
      return new Promise<void>(() => undefined);
    });
    void calls.join("k", b.signal);
    a.abort();
    assert.equal(signal?.aborted, false, "b still waits");
    b.abort();
    assert.equal(signal?.aborted, true);
  });

  it("a request asking after every waiter gave up, while the aborted call still settles, starts its own", async () => {
    const calls = new SharedCalls<string>();
    const a = new AbortController();
    const fail: ((err: unknown) => void)[] = [];
    const first = calls.start(
      "k",
      a.signal,
      (s) =>
        new Promise<string>((_resolve, reject) => {
          // The hub request closes on abort, and its rejection comes a turn later.
          s.addEventListener("abort", () => fail.push(reject), { once: true });
        }),
    );
    a.abort(new Error("a gave up"));
    const b = new AbortController();
    assert.equal(calls.join("k", b.signal), undefined, "b does not join the call aborted for a");
    const second = calls.start("k", b.signal, () => Promise.resolve("for b"));
    for (const f of fail) f(new Error("aborted"));
    await assert.rejects(first, /aborted/);
    assert.equal(await second, "for b");
    let finish: (v: string) => void = () => undefined;
    const third = calls.start("k", undefined, () => new Promise<string>((resolve) => (finish = resolve)));
    assert.equal(calls.join("k", undefined), third, "the aborted call's end forgets only itself");
    finish("done");
    assert.equal(await third, "done");
  });
});
