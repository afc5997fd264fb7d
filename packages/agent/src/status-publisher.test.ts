import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { silentLogger } from "@cluster-proxy/kit";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import type { ConnectionCondition } from "./connect/connection-report.js";
import { StatusPublisher, inClusterPatchSender } from "./status-publisher.js";

const condition = (status: "True" | "False", message: string): ConnectionCondition => ({
  type: "ProxyAgentConnected",
  status,
  reason: status === "True" ? "Connected" : "NotConnected",
  message,
});

describe("StatusPublisher", () => {
  test("writes changes only, one at a time, the latest state winning; retries a failed write", async () => {
    const sent: string[] = [];
    let failNext = 0;
    const publisher = new StatusPublisher({
      namespace: "agents",
      deployment: "agent",
      logger: silentLogger,
      minIntervalMs: 20,
      retryMs: 20,
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
    await publisher.whenIdle();
    assert.deepEqual(messages(), ["a: cannot connect: ECONNREFUSED"]);
    // States that pass while a write waits are skipped: the latest is written.
    publisher.publish(condition("False", "a: first"));
    publisher.publish(condition("False", "a: second"));
    publisher.publish(condition("True", "a: connected to 1 of 1 proxy-server"));
    await publisher.whenIdle();
    assert.deepEqual(messages().slice(1), ["a: connected to 1 of 1 proxy-server"]);
    // A refused write is tried again until it lands.
    failNext = 2;
    publisher.publish(condition("False", "a: lost"));
    await publisher.whenIdle();
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
    await publisher.whenIdle();
    assert.equal(sent.length, 5, "nothing after close");
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
    const requests: { method?: string; url?: string; headers: Record<string, unknown>; body: string }[] = [];
    let answer = 200;
    const server = https.createServer({ key: pki.serverKey, cert: pki.serverCert }, (req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (c: string) => (body += c));
      req.on("end", () => {
        requests.push({ method: req.method, url: req.url, headers: req.headers, body });
        res.writeHead(answer, { "content-type": "application/json" });
        res.end(JSON.stringify({ kind: "Status", message: answer === 200 ? "ok" : "deployments.apps is forbidden" }));
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    try {
      const env = {
        KUBERNETES_SERVICE_HOST: "127.0.0.1",
        KUBERNETES_SERVICE_PORT: String((server.address() as AddressInfo).port),
      };
      const send = inClusterPatchSender("agents", "cluster-proxy-proxy-agent", env, dir, 5000);
      await send('{"status":{}}');
      assert.equal(requests[0]!.method, "PATCH");
      assert.equal(requests[0]!.url, "/apis/apps/v1/namespaces/agents/deployments/cluster-proxy-proxy-agent/status");
      assert.equal(requests[0]!.headers.authorization, "Bearer the-token");
      assert.equal(requests[0]!.headers["content-type"], "application/strategic-merge-patch+json");
      assert.equal(requests[0]!.body, '{"status":{}}');
      answer = 403;
      await assert.rejects(send("{}"), /HTTP 403: deployments\.apps is forbidden/);
      await assert.rejects(inClusterPatchSender("agents", "x", {}, dir)("{}"), /KUBERNETES_SERVICE_HOST is not set/);
      await assert.rejects(
        inClusterPatchSender("agents", "x", env, join(dir, "missing"))("{}"),
        /no service account token/,
      );
      await rm(join(dir, "ca.crt"));
      await assert.rejects(send("{}"), /cannot read the cluster CA of the service account in .*ENOENT/);
    } finally {
      server.close();
      server.closeAllConnections();
    }
    await waitUntil("server closed", () => !server.listening);
  });
});
