import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { IdleWaiters, InFlight, Lifecycle } from "./lifecycle.js";
import { ManualClock } from "./testing/manual-clock.js";

describe("Lifecycle", () => {
  test("start, drain and close each run once; later calls get the first promise", async () => {
    const life = new Lifecycle<number>("thing");
    let starts = 0;
    let drains = 0;
    let closes = 0;
    const start = (): Promise<number> => Promise.resolve(++starts);
    assert.equal(life.started, false);
    const [a, b] = await Promise.all([life.start(start), life.start(start)]);
    assert.deepEqual([a, b, starts, life.started, life.stopping], [1, 1, 1, true, false]);
    const drain = (): Promise<boolean> => Promise.resolve(++drains > 0);
    assert.deepEqual(await Promise.all([life.drain(drain), life.drain(drain)]), [true, true]);
    assert.equal(life.stopping, true);
    const close = (): Promise<void> => Promise.resolve(void closes++);
    await Promise.all([life.close(close), life.close(close)]);
    assert.deepEqual([drains, closes, life.closed], [1, 1, true]);
  });

  test("a start after close rejects naming the component; a drain after close resolves false", async () => {
    const life = new Lifecycle<void>("proxy-agent");
    await life.close(() => Promise.resolve());
    await assert.rejects(
      life.start(() => assert.fail("must not start")),
      /proxy-agent is closed/,
    );
    assert.equal(await life.drain(() => assert.fail("must not drain")), false);
  });

  test("a failed start stays failed (start runs once)", async () => {
    const life = new Lifecycle<void>("thing");
    let runs = 0;
    const start = (): Promise<void> => Promise.reject(new Error(`bad flag ${++runs}`));
    await assert.rejects(life.start(start), /bad flag 1/);
    await assert.rejects(life.start(start), /bad flag 1/);
    assert.equal(runs, 1);
    await life.startSettled();
  });

  test("startSettled waits for a start in progress, and resolves at once without one", async () => {
    const life = new Lifecycle<void>("thing");
    await life.startSettled();
    let finish: () => void = () => undefined;
    void life.start(() => new Promise<void>((resolve) => (finish = resolve)));
    let settled = false;
    const waiting = life.startSettled().then(() => (settled = true));
    await Promise.resolve();
    assert.equal(settled, false);
    finish();
    await waiting;
    assert.equal(settled, true);
  });
});

describe("InFlight", () => {
  test("whenIdle resolves true at once with nothing in flight, and when the last work ends", async () => {
    const clock = new ManualClock();
    const counts: number[] = [];
    const work = new InFlight(clock, (n) => counts.push(n));
    assert.equal(await work.whenIdle(10), true);
    const endA = work.begin();
    const endB = work.begin();
    let idle: boolean | undefined;
    void work.whenIdle(1000).then((v) => (idle = v));
    endA();
    endA(); // a second end of the same work does nothing
    await Promise.resolve();
    assert.equal(idle, undefined);
    assert.equal(work.count, 1);
    endB();
    await Promise.resolve();
    assert.equal(idle, true);
    assert.deepEqual(counts, [1, 2, 1, 0]);
    assert.equal(clock.armed, 0, "the timeout is cancelled once idle");
  });

  test("whenIdle resolves false at its timeout, on the injected clock", async () => {
    const clock = new ManualClock();
    const work = new InFlight(clock);
    const end = work.begin();
    const idle = work.whenIdle(500);
    clock.advance(499);
    let settled = false;
    void idle.then(() => (settled = true));
    await Promise.resolve();
    assert.equal(settled, false);
    clock.advance(1);
    assert.equal(await idle, false);
    end();
    assert.equal(await work.whenIdle(), true);
  });
});

describe("IdleWaiters", () => {
  test("wakes its waiters only when the condition holds at a notify", async () => {
    let open = 2;
    const waiters = new IdleWaiters(() => open === 0, new ManualClock());
    let idle: boolean | undefined;
    void waiters.wait().then((v) => (idle = v));
    open = 1;
    waiters.notify();
    await Promise.resolve();
    assert.equal(idle, undefined);
    open = 0;
    waiters.notify();
    await Promise.resolve();
    assert.equal(idle, true);
  });
});
