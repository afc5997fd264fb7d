/**
 * The per-caller caps of one cluster, driven by a manual clock: the queue and its deadline, a
 * full queue, long-running requests counted apart (a caller's watches never starve its own gets),
 * callers and clusters counted apart, a caller that leaves while queued, and what counts as
 * long-running and who counts as one caller.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@cluster-proxy/kit/testing";
import type { GatewayError } from "./gateway-error.js";
import { parseRequestTarget, type RequestTarget } from "./request-target.js";
import { sourceKey } from "./source-buckets.js";
import { UserCaps, callerKey, kindOf, type CapRefusal, type Release } from "./user-caps.js";

function caps(clock: ManualClock, refusals: CapRefusal[] = []): UserCaps {
  return new UserCaps({
    maxRequests: 2,
    maxQueued: 2,
    queueTimeoutMs: 1_000,
    maxLongRunning: 3,
    clock,
    onRefusal: (r) => refusals.push(r),
  });
}

/** Whether `p` has settled (after the microtasks queued so far). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setImmediate(r));
  return done;
}

const is429 = (e: GatewayError): boolean => e.status === 429 && e.retryAfterSeconds === 1;

describe("UserCaps", () => {
  test("over the cap a request waits its turn; past the deadline it is refused with 429 and Retry-After", async () => {
    const clock = new ManualClock();
    const refusals: CapRefusal[] = [];
    const c = caps(clock, refusals);
    const a = await c.acquire("mc1", "user:greedy", "request");
    await c.acquire("mc1", "user:greedy", "request");
    const third = c.acquire("mc1", "user:greedy", "request");
    const fourth = c.acquire("mc1", "user:greedy", "request");
    assert.equal(await settled(third), false, "queued");
    await assert.rejects(c.acquire("mc1", "user:greedy", "request"), (e: GatewayError) => {
      assert.ok(is429(e));
      assert.match(e.message, /2 in flight and 2 waiting \(--max-requests-per-user/);
      return true;
    });
    a();
    a(); // twice is once
    const granted: Release = await third;
    assert.equal(await settled(fourth), false, "one freed place, one request in");
    clock.advance(1_000);
    await assert.rejects(fourth, (e: GatewayError) => is429(e) && /waited 1000 ms/.test(e.message));
    assert.deepEqual(refusals, ["queue-full", "queue-timeout"]);
    granted();
    assert.deepEqual(c.counts, { requests: 1, longRunning: 0, queued: 0 });
  });

  test("long-running requests count apart: a caller's watches never starve its gets, and are refused at once over their cap", async () => {
    const clock = new ManualClock();
    const refusals: CapRefusal[] = [];
    const c = caps(clock, refusals);
    const watches = await Promise.all([1, 2, 3].map(() => c.acquire("mc1", "user:ctrl", "long-running")));
    await assert.rejects(
      c.acquire("mc1", "user:ctrl", "long-running"),
      (e: GatewayError) => is429(e) && /--max-long-running-per-user/.test(e.message),
    );
    assert.deepEqual(refusals, ["long-running"]);
    assert.equal(clock.armed, 0, "refused at once, not queued");
    const gets = [c.acquire("mc1", "user:ctrl", "request"), c.acquire("mc1", "user:ctrl", "request")];
    assert.ok(await settled(Promise.all(gets)), "gets go in while every watch slot is taken");
    watches[0]!();
    await c.acquire("mc1", "user:ctrl", "long-running");
  });

  test("callers and clusters have their own places", async () => {
    const c = caps(new ManualClock());
    await c.acquire("mc1", "user:a", "request");
    await c.acquire("mc1", "user:a", "request");
    assert.ok(await settled(c.acquire("mc1", "user:b", "request")));
    assert.ok(await settled(c.acquire("mc2", "user:a", "request")));
  });

  test("a caller that leaves while queued gives its place up; nothing is kept once idle", async () => {
    const clock = new ManualClock();
    const c = caps(clock);
    const held = [await c.acquire("mc1", "user:a", "request"), await c.acquire("mc1", "user:a", "request")];
    const gone = new AbortController();
    const queued = c.acquire("mc1", "user:a", "request", gone.signal);
    gone.abort();
    await assert.rejects(queued, (e: GatewayError) => e.status === 499);
    assert.equal(clock.armed, 0, "its deadline is cancelled");
    for (const r of held) r();
    assert.deepEqual(c.counts, { requests: 0, longRunning: 0, queued: 0 });
  });
});

describe("who and what", () => {
  const target = (url: string): RequestTarget => {
    const p = parseRequestTarget(url);
    assert.ok(p.ok);
    return p.target;
  };

  test("watches, follow=true and upgrades are long-running; lists, gets and Service requests are not", () => {
    for (const url of [
      "/mc1/api/v1/pods?watch=true",
      "/mc1/api/v1/namespaces/a/pods?watch=1&resourceVersion=5",
      "/mc1/api/v1/watch/pods",
      "/mc1/apis/apps/v1/watch/namespaces/a/deployments",
      "/mc1/api/v1/namespaces/a/pods/p/log?follow=true",
    ])
      assert.equal(kindOf(target(url), false), "long-running", url);
    for (const url of [
      "/mc1/api/v1/pods",
      "/mc1/api/v1/namespaces/a/pods/p/log",
      "/mc1/api/v1/namespaces/a/pods/watch",
      "/mc1/api/v1/namespaces/a/services/https:web:443/proxy-service/x?watch=true",
    ])
      assert.equal(kindOf(target(url), false), "request", url);
    assert.equal(kindOf(target("/mc1/api/v1/namespaces/a/pods/p/exec?command=sh"), true), "long-running");
  });

  test("a hub caller counts by user name; a pass-through caller by its address, IPv6 by its /64", () => {
    const user = { username: "alice", groups: [], extra: {} };
    assert.equal(callerKey({ method: "token", user }, "10.0.0.1"), callerKey({ method: "x509", user }, "10.0.0.2"));
    const pass = (source: string): string => callerKey({ method: "passthrough", authorization: "Bearer x" }, source);
    assert.equal(pass("10.0.0.1"), pass("::ffff:10.0.0.1"));
    assert.notEqual(pass("10.0.0.1"), pass("10.0.0.2"));
    assert.equal(pass("2001:db8:1:2::1"), pass("2001:0db8:0001:0002:ffff::9"));
    assert.notEqual(pass("2001:db8:1:2::1"), pass("2001:db8:1:3::1"));
    assert.equal(sourceKey("2001:db8::1"), "source:2001:db8:0:0::/64");
  });
});
