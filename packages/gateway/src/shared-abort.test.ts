import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SharedAbort } from "./shared-abort.js";

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
