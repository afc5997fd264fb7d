import { test } from "node:test";
import assert from "node:assert/strict";
import { silentLogger } from "@cluster-proxy/kit";
import { HubAccess } from "./hub-tunnel.js";
import { ReplicaServerTargets } from "./replica-targets.js";
import { BalancedServerTargets, type HeldTunnel } from "./server-targets.js";

test("load-balanced: the servers' count is learned from each new server; a leaving server is replaced", () => {
  const held = new Map<string, HeldTunnel>();
  const targets = new BalancedServerTargets(() => held.values());
  assert.equal(targets.knownServerCount, 1);
  assert.equal(targets.eager, false);
  assert.equal(targets.wantsAnother(), true);
  const target = targets.pick();
  assert.equal(target.open, undefined, "the address is dialled directly");
  held.set("a", { serverLeaving: false });
  targets.opened("a", target, 3);
  assert.equal(targets.knownServerCount, 3);
  assert.equal(targets.wantsAnother(), true);
  held.set("b", { serverLeaving: false });
  held.set("c", { serverLeaving: false });
  assert.equal(targets.wantsAnother(), false);
  held.set("c", { serverLeaving: true });
  assert.equal(targets.wantsAnother(), true, "a draining server counts as gone");
  // A count below 1 (Go takes it as given) would stop reconnecting after a loss: 1 at least.
  targets.opened("d", {}, 0);
  assert.equal(targets.knownServerCount, 1);
});

test("PortForward: each ready replica is a target, tried in name order after the last one, wrapping", () => {
  const changes: string[][] = [];
  const targets = new ReplicaServerTargets({
    access: new HubAccess("/nonexistent/kubeconfig"),
    namespace: "ns",
    service: "proxy-entrypoint",
    port: 8096,
    timeoutMs: 1000,
    retryMs: 1000,
    logger: silentLogger,
    onChange: (pods) => changes.push(pods),
    onError: () => {},
  });
  assert.equal(targets.eager, true);
  assert.equal(targets.wantsAnother(), false, "no replica known yet");
  assert.equal(targets.pick(), undefined);
  assert.equal(targets.knownServerCount, 1);

  targets.setReady(["p1", "p2", "p3"]);
  assert.deepEqual(changes, [["p1", "p2", "p3"]]);
  assert.equal(targets.knownServerCount, 3, "the ready replicas are the count");
  const first = targets.pick()!;
  assert.equal(first.pod, "p1");
  assert.equal(typeof first.open, "function", "through the hub apiserver");
  // p1 failed (never opened): the next attempt goes to p2, so one bad pod blocks none.
  assert.equal(targets.pick()!.pod, "p2");
  targets.opened("server-2", { pod: "p2" });
  assert.equal(targets.pick()!.pod, "p3");
  targets.opened("server-3", { pod: "p3" });
  assert.equal(targets.pick()!.pod, "p1", "wraps around to the first missing one");
  targets.opened("server-1", { pod: "p1" });
  assert.equal(targets.wantsAnother(), false);
  assert.equal(targets.pick(), undefined);

  targets.closed("server-2");
  assert.equal(targets.wantsAnother(), true);
  assert.equal(targets.pick()!.pod, "p2");
  targets.setReady(["p1", "p3"]);
  assert.equal(targets.knownServerCount, 2);
  assert.equal(targets.wantsAnother(), false, "a replica that is no longer ready is not wanted");
});
