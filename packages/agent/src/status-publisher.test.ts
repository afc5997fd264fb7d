import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { KubeResources } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import type { ConnectionCondition } from "./connect/connection-report.js";
import { StatusPublisher, inClusterPatchSender } from "./status-publisher.js";

const condition = (status: "True" | "False", message: string): ConnectionCondition => ({
  type: "ProxyAgentConnected",
  status,
  reason: status === "True" ? "Connected" : "NotConnected",
  message,
});

/**
 * Resolves once `publisher` is idle, moving `clock` 10 ms at a time in between (its writes wait on
 * it); fails when it is not within a simulated minute.
 */
async function idle(publisher: StatusPublisher, clock: ManualClock): Promise<void> {
  let done = false;
  void publisher.whenIdle().then(() => (done = true));
  for (let i = 0; i < 6_000 && !done; i++) {
    for (let j = 0; j < 3; j++) await new Promise((r) => setImmediate(r));
    if (!done) clock.advance(10);
  }
  assert.ok(done, "idle within a minute of the clock");
}

describe("StatusPublisher", () => {
  test("writes changes only, one at a time, the latest state winning; retries a failed write", async () => {
    const sent: string[] = [];
    let failNext = 0;
    const clock = new ManualClock();
    const publisher = new StatusPublisher({
      namespace: "agents",
      deployment: "agent",
      logger: silentLogger,
      minIntervalMs: 20,
      retryMs: 20,
      clock,
      send: (body) => {
        sent.push(body);
        if (failNext > 0) {
          failNext--;
          return Promise.reject(new Error("HTTP 403: forbidden"));
        }
        return Promise.resolve();
      },
    });
    const messages = (): string[] =>
      sent.map(
        (b) => (JSON.parse(b) as { status: { conditions: ConnectionCondition[] } }).status.conditions[0]!.message,
      );
    // A reconnect loop failing the same way again and again: one write.
    for (let i = 0; i < 50; i++) publisher.publish(condition("False", "a: cannot connect: ECONNREFUSED"));
    await idle(publisher, clock);
    assert.deepEqual(messages(), ["a: cannot connect: ECONNREFUSED"]);
    // States that pass while a write waits are skipped: the latest is written.
    publisher.publish(condition("False", "a: first"));
    publisher.publish(condition("False", "a: second"));
    publisher.publish(condition("True", "a: connected to 1 of 1 proxy-server"));
    await idle(publisher, clock);
    assert.deepEqual(messages().slice(1), ["a: connected to 1 of 1 proxy-server"]);
    // A refused write is tried again until it lands.
    failNext = 2;
    publisher.publish(condition("False", "a: lost"));
    await idle(publisher, clock);
    assert.deepEqual(messages().slice(2), ["a: lost", "a: lost", "a: lost"]);
    const body = JSON.parse(sent.at(-1)!) as { status: { conditions: Record<string, string>[] } };
    assert.deepEqual(Object.keys(body.status.conditions[0]!).sort(), [
      "lastTransitionTime",
      "lastUpdateTime",
      "message",
      "reason",
      "status",
      "type",
    ]);
    publisher.close();
    publisher.publish(condition("True", "after close"));
    await idle(publisher, clock);
    assert.equal(sent.length, 5, "nothing after close");
  });

  test("writes are spaced and stamped by the injected clock", async () => {
    const sent: string[] = [];
    const clock = new ManualClock();
    clock.advance(Date.parse("2026-01-02T03:04:05Z"));
    const publisher = new StatusPublisher({
      namespace: "agents",
      deployment: "agent",
      logger: silentLogger,
      minIntervalMs: 1_000,
      send: (body) => {
        sent.push(body);
        return Promise.resolve();
      },
      clock,
    });
    const flush = async (): Promise<void> => {
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
    };
    publisher.publish(condition("False", "down"));
    clock.advance(0);
    await flush();
    assert.equal(sent.length, 1, "the first write at once");
    const first = JSON.parse(sent[0]!) as { status: { conditions: Record<string, string>[] } };
    assert.equal(first.status.conditions[0]!.lastUpdateTime, "2026-01-02T03:04:05Z", "stamped with the clock's time");
    publisher.publish(condition("True", "up"));
    clock.advance(999);
    await flush();
    assert.equal(sent.length, 1, "not before the minimum interval of the clock");
    clock.advance(1);
    await flush();
    assert.equal(sent.length, 2);
    const second = JSON.parse(sent[1]!) as { status: { conditions: Record<string, string>[] } };
    assert.equal(second.status.conditions[0]!.lastUpdateTime, "2026-01-02T03:04:06Z");
    assert.equal(second.status.conditions[0]!.lastTransitionTime, "2026-01-02T03:04:06Z");
    publisher.close();
  });
});

describe("inClusterPatchSender", () => {
  let pki: TestPki;
  let dir: string;
  before(async () => {
    pki = await createTestPki();
    dir = await mkdtemp(join(tmpdir(), "cp-sa-"));
    await writeFile(join(dir, "token"), "the-token\n");
    await writeFile(join(dir, "ca.crt"), pki.ca);
  });
  after(async () => {
    pki.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  test("PATCHes the Deployment's status subresource with the pod's token, verifying the apiserver", async () => {
    const fake = await FakeApiServer.start([], { tls: { key: pki.serverKey, cert: pki.serverCert } });
    const available = { type: "Available", status: "True", reason: "MinimumReplicasAvailable", message: "up" };
    fake.put(KubeResources.deployment, {
      metadata: { name: "cluster-proxy-proxy-agent", namespace: "agents" },
      status: { conditions: [available] },
    });
    const requests = fake.requests;
    try {
      const env = {
        KUBERNETES_SERVICE_HOST: "127.0.0.1",
        KUBERNETES_SERVICE_PORT: new URL(fake.url).port,
      };
      const send = inClusterPatchSender("agents", "cluster-proxy-proxy-agent", env, dir, 5000);
      await send('{"status":{}}');
      assert.equal(requests[0]!.method, "PATCH");
      assert.equal(requests[0]!.path, "/apis/apps/v1/namespaces/agents/deployments/cluster-proxy-proxy-agent/status");
      assert.equal(requests[0]!.headers.authorization, "Bearer the-token");
      assert.equal(requests[0]!.headers["content-type"], "application/strategic-merge-patch+json");
      assert.deepEqual(requests[0]!.body, { status: {} });
      // A strategic merge patch: the condition is merged into the others by its type.
      const connected = condition("True", "a: connected to 1 of 1 proxy-server");
      await send(JSON.stringify({ status: { conditions: [connected] } }));
      const written = fake.object<{ metadata: { name: string }; status?: { conditions?: unknown[] } }>(
        KubeResources.deployment,
        "cluster-proxy-proxy-agent",
        "agents",
      );
      assert.deepEqual(
        new Set(written?.status?.conditions),
        new Set([available, connected]),
        "the other conditions are kept",
      );
      fake.failNext(1, {
        code: 403,
        reason: "Forbidden",
        message: `deployments.apps "cluster-proxy-proxy-agent" is forbidden: User "system:serviceaccount:agents:x" cannot patch resource "deployments/status" in API group "apps" in the namespace "agents"`,
      });
      await assert.rejects(send("{}"), /HTTP 403: deployments\.apps "cluster-proxy-proxy-agent" is forbidden/);
      await assert.rejects(inClusterPatchSender("agents", "x", {}, dir)("{}"), /KUBERNETES_SERVICE_HOST is not set/);
      await assert.rejects(
        inClusterPatchSender("agents", "x", env, join(dir, "missing"))("{}"),
        /no service account token/,
      );
      await rm(join(dir, "ca.crt"));
      await assert.rejects(send("{}"), /cannot read the cluster CA of the service account in .*ENOENT/);
    } finally {
      await fake.close();
    }
  });
});
