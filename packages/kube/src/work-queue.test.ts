import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { TerminalError, WorkQueue } from "./work-queue.js";

const until = async (check: () => boolean, what: string): Promise<void> => {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not reached`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe("WorkQueue", () => {
  it("runs a key queued many times once, and again if it was queued while running", async () => {
    const runs: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const queue = new WorkQueue(
      async (key) => {
        runs.push(key);
        if (runs.length === 1) await gate;
      },
      () => undefined,
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("a");
    queue.add("a");
    await until(() => runs.length === 1, "first run");
    queue.add("a"); // while running: once more afterwards
    queue.add("a");
    release();
    await until(() => runs.length === 2, "second run");
    await new Promise((r) => setTimeout(r, 30));
    assert.deepEqual(runs, ["a", "a"]);
    stop.abort();
    await running;
  });

  it("retries a failing key with growing delays and reports each failure", async () => {
    const times: number[] = [];
    const errors: number[] = [];
    const queue = new WorkQueue(
      () => {
        times.push(Date.now());
        return times.length < 3 ? Promise.reject(new Error("boom")) : Promise.resolve();
      },
      (_key, _err, retryInMs) => errors.push(retryInMs ?? -1),
      20,
      1000,
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("k");
    await until(() => times.length === 3, "third attempt");
    assert.equal(errors.length, 2);
    assert.ok(errors[1]! >= errors[0]! / 2 && errors[1]! <= 40, `delays ${errors.join(",")}`);
    stop.abort();
    await running;
  });

  it("requeues a key when the handler asks to look again later", async () => {
    let runs = 0;
    const queue = new WorkQueue(
      () => {
        runs++;
        return Promise.resolve(runs === 1 ? { requeueAfterMs: 20 } : undefined);
      },
      () => undefined,
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("k");
    await until(() => runs === 2, "requeued run");
    stop.abort();
    await running;
  });

  it("retries a routine failure (a conflict) after the base delay, without growing the backoff", async () => {
    const reports: [number, boolean][] = [];
    let runs = 0;
    const conflict = new Error("409 Conflict");
    const queue = new WorkQueue(
      () => {
        runs++;
        return Promise.reject(runs <= 4 ? conflict : new Error("boom"));
      },
      (_key, _err, retryInMs, routine) => reports.push([retryInMs ?? -1, routine]),
      20,
      10_000,
      (err) => err === conflict,
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("k");
    await until(() => reports.length === 5, "five failures");
    stop.abort();
    await running;
    assert.deepEqual(reports.slice(0, 4), [
      [20, true],
      [20, true],
      [20, true],
      [20, true],
    ]);
    // The first real failure starts the backoff from the beginning.
    assert.equal(reports[4]![1], false);
    assert.ok(reports[4]![0] <= 40, `first backoff ${reports[4]![0]}`);
  });

  it("does not retry a terminal error; the key runs again when queued again", async () => {
    const runs: string[] = [];
    const reports: [string, number | undefined][] = [];
    const queue = new WorkQueue<"bad" | "good">(
      (key) => {
        runs.push(key);
        return key === "bad" ? Promise.reject(new TerminalError("spec refused")) : Promise.resolve();
      },
      (key, _err, retryInMs) => reports.push([key, retryInMs]),
      1,
      1,
    );
    const stop = new AbortController();
    const running = queue.run(stop.signal);
    queue.add("bad");
    await until(() => reports.length === 1, "the terminal error reported");
    // A retry would come after 1 ms; the queue stays idle instead until the key is queued again.
    queue.add("good");
    await until(() => runs.includes("good"), "another key runs");
    await new Promise((r) => setTimeout(r, 30));
    assert.deepEqual(runs, ["bad", "good"]);
    assert.deepEqual(reports, [["bad", undefined]]);
    queue.add("bad");
    await until(() => runs.length === 3, "queued again");
    stop.abort();
    await running;
  });
});
