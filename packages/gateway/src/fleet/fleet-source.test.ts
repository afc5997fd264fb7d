/**
 * The fleet view's hub source: rows from the hub's ManagedClusters and ManagedClusterAddOns (a
 * fake hub), the endpoint probes bounded (in all and per cluster), and the tap of request records
 * (traffic, open streams, audit entries; nothing for a cluster without a row).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FleetModel } from "@cluster-proxy/fleet";
import type { AuditRecord } from "../audit-log.js";
import type { EndpointProbe } from "../endpoint-probe.js";
import { FleetSource, auditEntryOf } from "./fleet-source.js";
import { FakeHub } from "../testing/fake-hub.js";

const AT = "2026-11-26T20:00:00Z";
const available = (message: string, status: "True" | "False" = "True") => ({
  status,
  reason: status === "True" ? "ProxyAgentAvailable" : "ProxyAgentUnavailable",
  message,
  lastTransitionTime: AT,
});

/** Resolves when `check` holds, re-checked on every change of `model`. */
function until(model: FleetModel, check: () => boolean, ms = 5_000): Promise<void> {
  if (check()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`not within ${ms} ms`));
    }, ms);
    const stop = model.subscribe(() => {
      if (!check()) return;
      clearTimeout(timer);
      stop();
      resolve();
    });
  });
}

function record(over: Partial<AuditRecord>): AuditRecord {
  return {
    time: new Date().toISOString(),
    requestID: "r",
    method: "GET",
    code: 200,
    bytesIn: 10,
    bytesOut: 100,
    durationMs: 3,
    decision: "allow",
    ...over,
  };
}

describe("fleet source", () => {
  test("a row per ManagedCluster: installed, Available, replicas by name, probed latency and certificate expiry", async () => {
    const hub = new FakeHub();
    hub.addCluster("mc1");
    hub.addCluster("mc2");
    hub.setAddOn(
      "mc1",
      available("tunnel works through 1 of 2 proxy-servers (s1); s2 (10.0.0.2): 503 Service Unavailable: no agent"),
    );
    const model = new FleetModel();
    const probed: string[] = [];
    const source = new FleetSource({
      hub,
      model,
      probe: (cluster) => {
        probed.push(cluster);
        return Promise.resolve({ ok: true, latencyMs: 4.5, certificateExpiry: "2027-01-01T00:00:00.000Z", reason: "" });
      },
    });
    source.start();
    try {
      await until(model, () => model.row("mc1")?.latencyMs === 4.5);
      assert.deepEqual(model.row("mc1"), {
        cluster: "mc1",
        installed: true,
        available: "True",
        latencyMs: 4.5,
        agentsByServer: { s1: 1, s2: 0 },
        serversExpected: 2,
        agentCertExpiry: "2027-01-01T00:00:00.000Z",
        lastChange: AT,
        reason: "",
      });
      const mc2 = model.row("mc2");
      assert.equal(mc2?.installed, false);
      assert.equal(mc2?.available, "Unknown");
      assert.equal(mc2?.latencyMs, null);
      assert.match(mc2?.reason ?? "", /ManagedClusterAddOn cluster-proxy not found in namespace mc2/);
      assert.deepEqual(probed, ["mc1"], "only installed clusters are probed");

      hub.setAddOn("mc1", available("tunnel works through 0 of 1 proxy-server; s1 (10.0.0.1): no agent", "False"));
      await until(model, () => model.row("mc1")?.available === "False");
      const down = model.row("mc1")!;
      assert.deepEqual(down.agentsByServer, { s1: 0 });
      assert.match(down.reason, /^Available=False \(ProxyAgentUnavailable\): tunnel works through 0 of 1/);
      assert.notEqual(down.lastChange, AT, "a change seen live is dated now");

      hub.removeCluster("mc2");
      await until(model, () => !model.has("mc2"));
      hub.removeAddOn("mc1");
      await until(model, () => model.row("mc1")?.installed === false);
      assert.equal(model.row("mc1")?.latencyMs, null);
    } finally {
      source.stop();
    }
  });

  test("a manager that does not name the replicas: the counts alone", () => {
    const hub = new FakeHub();
    hub.addCluster("mc1");
    hub.setAddOn("mc1", available("tunnel works through 2 of 3 proxy-servers; s3 (10.0.0.3): timeout"));
    const model = new FleetModel();
    const source = new FleetSource({ hub, model, probe: () => Promise.resolve({ ok: false, reason: "down" }) });
    source.start();
    try {
      const row = model.row("mc1")!;
      assert.equal(row.serversExpected, 3);
      assert.equal(Object.values(row.agentsByServer).filter((n) => n > 0).length, 2);
      assert.equal(row.agentsByServer.s3, 0);
    } finally {
      source.stop();
    }
  });

  test("probes stay bounded at 1,000 clusters: at most the concurrency at once, never two at once for a cluster", async () => {
    const hub = new FakeHub();
    for (let i = 0; i < 1000; i++) {
      hub.addCluster(`c${i}`);
      hub.setAddOn(`c${i}`, available("tunnel works through 1 of 1 proxy-server (s1)"));
    }
    const model = new FleetModel();
    let inFlight = 0;
    let most = 0;
    const running = new Set<string>();
    let twice = false;
    const done = new Set<string>();
    let finished: () => void = () => undefined;
    const allDone = new Promise<void>((r) => (finished = r));
    const source = new FleetSource({
      hub,
      model,
      probeConcurrency: 8,
      probeIntervalMs: 1,
      probe: async (cluster): Promise<EndpointProbe> => {
        if (running.has(cluster)) twice = true;
        running.add(cluster);
        most = Math.max(most, ++inFlight);
        await new Promise((r) => setImmediate(r));
        inFlight--;
        running.delete(cluster);
        done.add(cluster);
        if (done.size === 1000) finished();
        return { ok: true, latencyMs: 1, reason: "" };
      },
    });
    source.start();
    try {
      await allDone;
      assert.equal(most, 8);
      assert.ok(source.probesInFlight <= 8);
      assert.equal(twice, false);
    } finally {
      source.stop();
    }
  });

  test("the tap: traffic, errors, open streams and audit entries of clusters with a row; others dropped", () => {
    const hub = new FakeHub();
    hub.addCluster("mc1");
    const model = new FleetModel();
    const source = new FleetSource({ hub, model, probe: () => Promise.resolve({ ok: false, reason: "" }) });
    source.start();
    try {
      source.tap.streamOpened("mc1");
      assert.equal(model.detail("mc1", true)?.openStreams, 1);
      source.tap.finished(record({ cluster: "mc1", user: "alice", verb: "watch", resource: "configmaps" }), true);
      source.tap.finished(record({ cluster: "mc1", code: 502, decision: "error", reason: "no tunnel" }), false);
      source.tap.finished(
        record({ cluster: "mc1", user: "alice", code: 403, decision: "deny", reason: "may not", verb: "get" }),
        false,
      );
      source.tap.streamOpened("nowhere");
      source.tap.finished(record({ cluster: "nowhere", user: "mallory" }), true);
      const d = model.detail("mc1", true)!;
      assert.equal(d.openStreams, 0);
      const last = d.series.at(-1)!;
      assert.deepEqual([last.requests, last.errors, last.bytesIn, last.bytesOut], [3, 1, 30, 300]);
      assert.equal(d.audit?.length, 3);
      assert.deepEqual(
        d.audit?.map((e) => [e.user, e.status, e.denied]),
        [
          ["alice", 403, true],
          ["", 502, false],
          ["alice", 200, false],
        ],
      );
      assert.equal(model.has("nowhere"), false);
    } finally {
      source.stop();
    }
  });

  test("audit entries: resource/subresource, a Service, a non-resource path", () => {
    const base = record({ user: "bob" });
    assert.equal(auditEntryOf({ ...base, resource: "pods", subresource: "exec" }).resource, "pods/exec");
    assert.equal(auditEntryOf({ ...base, service: "http://web.default:80" }).resource, "service http://web.default:80");
    const version = auditEntryOf({ ...base, verb: "get", path: "/version" });
    assert.deepEqual([version.resource, version.path], ["", "/version"]);
  });
});
