import assert from "node:assert/strict";
import { test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { connectAgain, type ConnectAgainOptions } from "./connect-again.js";

const refused = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });

/** Options whose unreached failures are `refused`; `exhausted` names the attempts. */
function options(clock: ManualClock, extra: Partial<ConnectAgainOptions<Error>> = {}): ConnectAgainOptions<Error> {
  return {
    unreached: (err): err is Error => err === refused,
    timers: clock,
    exhausted: (_err, note) => new Error(`refused ${note}`),
    ...extra,
  };
}

/** Let the attempt run and its pause get armed. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

test("connects again after 50, 100, 200 and 400 ms (and up to 10% more), then gives up after 5 connections", async () => {
  const clock = new ManualClock();
  let attempts = 0;
  const result = connectAgain(() => {
    attempts++;
    return Promise.reject(refused);
  }, options(clock));
  const failed = assert.rejects(result, /^Error: refused \(5 connections, none taken\)$/);
  for (const pause of [50, 100, 200, 400]) {
    await settle();
    clock.advance(pause - 1);
    await settle();
    assert.equal(attempts, [50, 100, 200, 400].indexOf(pause) + 1, `no new connection before ${pause} ms`);
    clock.advance(Math.ceil(pause * 0.1) + 1);
  }
  await failed;
  assert.equal(attempts, 5);
});

test("a connection that got its answer, and any other failure, is not made again", async () => {
  const clock = new ManualClock();
  let attempts = 0;
  const taking = connectAgain(() => {
    attempts++;
    return attempts === 1 ? Promise.reject(refused) : Promise.resolve("taken");
  }, options(clock));
  await settle();
  clock.advance(60);
  assert.equal(await taking, "taken");
  assert.equal(attempts, 2);
  attempts = 0;
  const other = new Error("certificate refused");
  await assert.rejects(
    connectAgain(() => {
      attempts++;
      return Promise.reject(other);
    }, options(clock)),
    (err) => err === other,
  );
  assert.equal(attempts, 1);
});

test("stop ends a pause at once, without another connection; no pause runs past the deadline", async () => {
  const clock = new ManualClock();
  const stop = new AbortController();
  let attempts = 0;
  const result = connectAgain(
    () => {
      attempts++;
      return Promise.reject(refused);
    },
    options(clock, { stop: stop.signal }),
  );
  await settle();
  stop.abort();
  await assert.rejects(result, (err) => err === refused);
  assert.equal(attempts, 1);
  assert.equal(clock.armed, 0, "no pause left armed");
  attempts = 0;
  const deadline = clock.now() + 30;
  const outOfTime = new Error("timed out");
  const late = connectAgain(
    () => {
      attempts++;
      return Promise.reject(refused);
    },
    options(clock, { timeLeftMs: () => deadline - clock.now(), outOfTime: () => outOfTime }),
  );
  const timedOut = assert.rejects(late, (err) => err === outOfTime);
  await settle();
  clock.advance(30);
  await timedOut;
  assert.equal(attempts, 1, "the 50 ms pause was cut to the 30 ms left, then the time was out");
});
