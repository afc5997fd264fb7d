/**
 * kubeHubApi's per-call timeouts run on the timers it is given: against a hub that accepts but
 * never answers, a review fails exactly when a ManualClock passes its timeout (no wall-clock wait).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { kubeHubApi } from "./kube-hub.js";

test("a review the hub does not answer fails when the injected clock passes its timeout", async () => {
  const asked: http.IncomingMessage[] = [];
  const server = http.createServer((req) => void asked.push(req));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        { name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true },
      ],
      users: [{ name: "u", token: "hub" }],
      contexts: [{ name: "ctx", cluster: "c", user: "u" }],
      currentContext: "ctx",
    });
    const clock = new ManualClock();
    const hub = kubeHubApi(kc, silentLogger, 3_000, clock);
    let failed = false;
    const review = hub.tokenReview("t");
    review.catch(() => (failed = true));
    // Once the hub has the request, only the clock can end it.
    if (asked.length === 0) await once(server, "request");
    assert.equal(clock.armed, 1, "the call's timeout is armed on the injected clock");
    clock.advance(2_999);
    await new Promise((r) => setImmediate(r));
    assert.equal(failed, false, "not before its timeout");
    clock.advance(1);
    await assert.rejects(review, /did not answer the TokenReview within 3000 ms/);
    assert.equal(clock.armed, 0, "and its timer is gone");
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
