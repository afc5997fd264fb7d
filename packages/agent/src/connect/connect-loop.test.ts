import { test } from "node:test";
import assert from "node:assert/strict";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { ConnectError } from "@cluster-proxy/tunnel";
import { ConnectLoop, type AttemptFailure, type AttemptResult } from "./connect-loop.js";
import type { ServerTarget, ServerTargets } from "./server-targets.js";

/** Targets that want `wanted` more tunnels; each opened tunnel takes one. */
class FakeTargets implements ServerTargets {
  readonly knownServerCount = 1;
  constructor(
    public wanted: number,
    readonly eager = false,
  ) {}
  wantsAnother(): boolean {
    return this.wanted > 0;
  }
  pick(): ServerTarget {
    return {};
  }
  opened(): void {
    this.wanted--;
  }
  closed(): void {
    this.wanted++;
  }
}

/** A tunnel opener whose attempts the test settles one by one. */
class FakeOpener {
  readonly pending: { resolve: (r: AttemptResult) => void; reject: (e: Error) => void }[] = [];
  calls = 0;
  constructor(private readonly targets: FakeTargets) {}
  readonly attempt = (): Promise<AttemptResult> => {
    this.calls++;
    return new Promise((resolve, reject) => this.pending.push({ resolve, reject }));
  };
  async connect(): Promise<void> {
    this.targets.opened();
    this.pending.shift()!.resolve("connected");
    await settle();
  }
  async fail(err: Error = new ConnectError("refused")): Promise<void> {
    this.pending.shift()!.reject(err);
    await settle();
  }
}

/** Let the attempt's promise callbacks run (no timers involved). */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function setup(wanted: number, eager = false, random = (): number => 0.5) {
  const clock = new ManualClock();
  const targets = new FakeTargets(wanted, eager);
  const opener = new FakeOpener(targets);
  const failures: AttemptFailure[] = [];
  const loop = new ConnectLoop({
    targets,
    attempt: opener.attempt,
    syncIntervalMs: 1000,
    syncIntervalCapMs: 10_000,
    random,
    clock,
    onFailure: (f) => failures.push(f),
  });
  return { clock, targets, opener, failures, loop };
}

test("failures back off from the sync interval by x1.5 with jitter, up to the cap; a success resets", async () => {
  const { clock, targets, opener, failures, loop } = setup(1, false, () => 1);
  loop.start();
  clock.advance(0);
  assert.equal(opener.calls, 1);
  const delays: number[] = [];
  for (let i = 0; i < 8; i++) {
    await opener.fail();
    const { retryInMs } = failures.at(-1)!;
    delays.push(retryInMs);
    clock.advance(retryInMs - 1);
    assert.equal(opener.calls, i + 1, "no attempt before the backoff is over");
    clock.advance(1);
    assert.equal(opener.calls, i + 2);
  }
  // random() = 1: +10 % jitter on 1000 * 1.5^n, capped at 10 s.
  assert.deepEqual(delays, [1100, 1650, 2475, 3713, 5569, 8353, 10_000, 10_000]);
  assert.deepEqual(
    failures.map((f) => f.failures),
    [1, 2, 3, 4, 5, 6, 7, 8],
  );
  await opener.connect();
  // Connected: the next check is a jittered sync interval away (random() = 1: +10 %).
  assert.equal(clock.armed, 1);
  targets.closed();
  clock.advance(1100);
  assert.equal(opener.calls, 10);
  await opener.fail();
  assert.equal(failures.at(-1)!.retryInMs, 1100, "the success reset the backoff");
  loop.stop();
});

test("the jitter spreads the delay: random() = 0 backs off the bare interval", async () => {
  const { clock, opener, failures, loop } = setup(1, false, () => 0);
  loop.start();
  clock.advance(0);
  await opener.fail();
  assert.equal(failures[0]!.retryInMs, 1000);
  clock.advance(1000);
  await opener.fail();
  assert.equal(failures[1]!.retryInMs, 1500);
  loop.stop();
});

test("a shedding server is asked again after a jittered --sync-interval-cap at least", async () => {
  const { clock, opener, failures, loop } = setup(1);
  loop.start();
  clock.advance(0);
  // What Node reports when the server cancels the TLS handshake (its overload answer).
  const shed = Object.assign(new Error("tlsv1 alert user cancelled"), { code: "ERR_SSL_TLSV1_ALERT_USER_CANCELLED" });
  await opener.fail(shed);
  assert.equal(failures[0]!.shedding, true);
  // random() = 0.5: backoff 1050, the cap's floor 10_000 * 0.75.
  assert.equal(failures[0]!.retryInMs, 7500);
  clock.advance(7499);
  assert.equal(opener.calls, 1);
  loop.stop();
});

test("an attempt that failed slowly is not repeated sooner than about its own duration", async () => {
  const { clock, opener, failures, loop } = setup(1);
  loop.start();
  clock.advance(0);
  clock.advance(8000); // the attempt hangs for 8 s, then fails
  await opener.fail();
  // max(backoff 1050, 8000 * (0.5 + 0.5)) with random() = 0.5
  assert.equal(failures[0]!.retryInMs, 8000);
  loop.stop();
});

test("while no tunnel is wanted the loop only checks, every jittered sync interval", () => {
  const { clock, opener, loop } = setup(0);
  loop.start();
  clock.advance(60_000);
  assert.equal(opener.calls, 0);
  assert.equal(clock.armed, 1);
  loop.stop();
  assert.equal(clock.armed, 0);
});

test("eager targets (known missing replicas) get the next attempt at once; others wait for the sync", async () => {
  const eager = setup(3, true);
  eager.loop.start();
  eager.clock.advance(0);
  await eager.opener.connect();
  eager.clock.advance(0);
  assert.equal(eager.opener.calls, 2, "the second replica at once");
  await eager.opener.connect();
  eager.clock.advance(0);
  assert.equal(eager.opener.calls, 3);
  eager.loop.stop();

  const lazy = setup(3, false);
  lazy.loop.start();
  lazy.clock.advance(0);
  await lazy.opener.connect();
  lazy.clock.advance(0);
  assert.equal(lazy.opener.calls, 1, "the load-balanced address waits for the next sync");
  lazy.clock.advance(1000);
  assert.equal(lazy.opener.calls, 2);
  lazy.loop.stop();
});

test("poke: a target that wants another tunnel (GOAWAY, a new replica) gets an attempt at once", async () => {
  const { clock, targets, opener, loop } = setup(1);
  loop.start();
  clock.advance(0);
  await opener.connect();
  clock.advance(100);
  assert.equal(opener.calls, 1);
  targets.closed();
  loop.poke();
  clock.advance(0);
  assert.equal(opener.calls, 2, "no waiting for the sync interval");
  // A poke during an attempt does nothing: the attempt's end schedules the next.
  loop.poke();
  assert.equal(clock.armed, 0);
  loop.stop();
});

test("lost: a fleet whose tunnels close together comes back spread over the sync interval, not at its shared phase", async () => {
  // 200 agents that connected in the same instant (one phase) lose their server at once.
  let seed = 7;
  const random = (): number => (seed = (seed * 16_807) % 2_147_483_647) / 2_147_483_647;
  const fleet = Array.from({ length: 200 }, () => setup(1, false, random));
  for (const f of fleet) {
    f.loop.start();
    f.clock.advance(0);
    await f.opener.connect();
  }
  // Each loop runs on its own clock; drive them together.
  const advance = (ms: number): void => {
    for (const f of fleet) f.clock.advance(ms);
  };
  advance(100);
  for (const f of fleet) {
    f.targets.closed();
    f.loop.lost();
  }
  const startedAt: number[] = [];
  for (let t = 0; t < 1_100; t += 10) {
    advance(10);
    for (const [i, f] of fleet.entries()) if (f.opener.calls === 2 && startedAt[i] === undefined) startedAt[i] = t;
  }
  assert.equal(startedAt.filter((t) => t !== undefined).length, 200, "every agent tried again within the interval");
  const peak = Math.max(
    ...[0, 100, 200, 300, 400, 500, 600, 700, 800, 900].map(
      (w) => startedAt.filter((t) => t >= w && t < w + 100).length,
    ),
  );
  assert.ok(peak <= 50, `${peak} of 200 tried again within one 100 ms window`);
  for (const f of fleet) f.loop.stop();
});

test("lost during a backoff keeps it: a server that failed us is not asked again sooner", async () => {
  const { clock, opener, loop } = setup(2, false, () => 1);
  loop.start();
  clock.advance(0);
  await opener.fail();
  // The backoff: 1,100 ms (the top of its jitter); a random point of the interval, 1,000 at most.
  loop.lost();
  clock.advance(1_000);
  assert.equal(opener.calls, 1, "not at the random point of the interval");
  clock.advance(100);
  assert.equal(opener.calls, 2);
  loop.stop();
});

test("lost during an attempt changes nothing: the attempt's end schedules the next", async () => {
  const { clock, opener, loop } = setup(1);
  loop.start();
  clock.advance(0);
  loop.lost();
  assert.equal(clock.armed, 0);
  await opener.fail();
  assert.equal(clock.armed, 1);
  loop.stop();
});

test("stop (drain, close): no further attempt, not even after one in flight ends or a poke", async () => {
  const { clock, opener, loop } = setup(2);
  loop.start();
  clock.advance(0);
  loop.stop();
  await opener.fail();
  loop.poke();
  clock.advance(60_000);
  assert.equal(opener.calls, 1);
  assert.equal(clock.armed, 0);
});
