/** up's fleet view: the model fed from the in-process proxy-server (a fake here), and its page's routes. */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { after, before, describe, test } from "node:test";
import type { ClusterDetail, FleetSnapshot } from "@cluster-proxy/fleet";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import type { DialProbeResult, IdentifierTraffic } from "@cluster-proxy/server";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import { UpFleet, type UpFleetServer } from "./up-fleet.js";
import { startUpFleetHttp } from "./up-fleet-http.js";
import { realClock } from "@cluster-proxy/kit";

/** A proxy-server whose agents, counters and probe answers the test sets. */
class FakeServer implements UpFleetServer {
  readonly serverId = "hub-1";
  agents = new Map<string, number>();
  traffic = new Map<string, IdentifierTraffic>();
  /** Probes waiting for the test's answer, by address. */
  readonly probes: { address: string; answer: (r: DialProbeResult) => void }[] = [];
  probeCalls = 0;
  agentsByIdentifier(): Map<string, number> {
    return new Map(this.agents);
  }
  trafficByIdentifier(): Map<string, IdentifierTraffic> {
    return new Map([...this.traffic].map(([k, v]) => [k, { ...v }]));
  }
  probe(address: string): Promise<DialProbeResult> {
    this.probeCalls++;
    return new Promise((answer) => this.probes.push({ address, answer }));
  }
  /** Answer the oldest waiting probe of `cluster`. */
  answer(cluster: string, result: DialProbeResult): void {
    const i = this.probes.findIndex((p) => p.address === `${cluster}:80`);
    assert.ok(i >= 0, `a probe of ${cluster} is waiting`);
    this.probes.splice(i, 1)[0]?.answer(result);
  }
}

const zero = (): IdentifierTraffic => ({
  dials: 0,
  failedDials: 0,
  bytesToAgent: 0,
  bytesFromAgent: 0,
  openConnections: 0,
});

let pki: TestPki;
before(async () => {
  pki = await createTestPki();
});
after(() => pki.cleanup());

/** A fleet over east and west whose timers never fire by themselves: the test polls. */
function fleetOf(server: FakeServer, now?: () => number): UpFleet {
  return new UpFleet({
    server,
    clusters: [
      { name: "east", agentCertFile: pki.paths.agent.cert },
      { name: "west", agentCertFile: "/nonexistent/agent.crt" },
    ],
    probeEveryMs: 3_600_000,
    pollMs: 3_600_000,
    ...(now ? { clock: { ...realClock, now } } : {}),
  });
}

/** Let the probe answers' continuations run. */
const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

describe("up's fleet model", () => {
  test("a row per cluster: agents per server, probed latency, availability with its reason, certificate expiry", async () => {
    const server = new FakeServer();
    server.agents.set("east", 1);
    const fleet = fleetOf(server);
    await fleet.start();
    try {
      assert.deepEqual(
        server.probes.map((p) => p.address),
        ["east:80", "west:80"],
        "every cluster is probed at start",
      );
      assert.equal(fleet.model.row("east")?.available, "Unknown");
      server.answer("east", { ok: true, ms: 3.14159 });
      server.answer("west", { ok: false, reason: "No agent available" });
      await settle();
      const east = fleet.model.row("east");
      assert.equal(east?.available, "True");
      assert.equal(east?.reason, "");
      assert.equal(east?.latencyMs, 3.1);
      assert.deepEqual(east?.agentsByServer, { "hub-1": 1 });
      assert.equal(east?.serversExpected, 1);
      assert.equal(east?.installed, true);
      assert.equal(east?.agentCertExpiry, new Date(new X509Certificate(pki.agentCert).validTo).toISOString());
      const west = fleet.model.row("west");
      assert.equal(west?.available, "False");
      assert.match(west?.reason ?? "", /no agent connected/);
      assert.deepEqual(west?.agentsByServer, {});
      assert.equal(west?.latencyMs, null);
      assert.equal(west?.agentCertExpiry, null, "an unreadable certificate: unknown expiry");
    } finally {
      fleet.close();
    }
  });

  test("an agent that goes away turns its row unavailable at the next poll; back, it is probed at once", async () => {
    const server = new FakeServer();
    server.agents.set("east", 1);
    let t = Date.parse("2026-11-26T10:00:00Z");
    const fleet = fleetOf(server, () => t);
    await fleet.start();
    try {
      server.answer("east", { ok: true, ms: 2 });
      server.answer("west", { ok: false, reason: "No agent available" });
      await settle();
      const changes: string[] = [];
      fleet.model.subscribe((c) => changes.push(`${c.kind}:${c.cluster}`));

      t += 1_000;
      server.agents.delete("east");
      fleet.poll();
      assert.equal(fleet.model.row("east")?.available, "False");
      assert.match(fleet.model.row("east")?.reason ?? "", /no agent connected/);
      assert.equal(fleet.model.row("east")?.lastChange, new Date(t).toISOString());
      assert.ok(changes.includes("row:east"), "listeners hear of it");

      t += 1_000;
      server.agents.set("east", 1);
      const calls = server.probeCalls;
      fleet.poll();
      assert.equal(server.probeCalls, calls + 1, "probed as soon as its agent is back");
      assert.equal(fleet.model.row("east")?.available, "Unknown", "not probed since it came back");
      server.answer("east", { ok: true, ms: 1 });
      await settle();
      assert.equal(fleet.model.row("east")?.available, "True");
    } finally {
      fleet.close();
    }
  });

  test("a failed probe makes the row unavailable with the probe's reason; probes never overlap", async () => {
    const server = new FakeServer();
    server.agents.set("east", 1);
    const fleet = fleetOf(server);
    await fleet.start();
    try {
      server.answer("east", { ok: false, reason: "dial tcp 127.0.0.1:1: connection refused" });
      await settle();
      const row = fleet.model.row("east");
      assert.equal(row?.available, "False");
      assert.equal(row?.reason, "the probe through the hub failed: dial tcp 127.0.0.1:1: connection refused");
      assert.equal(row?.latencyMs, null);
      // west's first probe is still out: agents coming and going do not start another.
      server.agents.set("west", 1);
      fleet.poll();
      server.agents.delete("west");
      fleet.poll();
      server.agents.set("west", 1);
      fleet.poll();
      assert.equal(server.probes.filter((p) => p.address === "west:80").length, 1);
    } finally {
      fleet.close();
    }
  });

  test("probes repeat after each answer, and stop on close", async () => {
    const server = new FakeServer();
    server.agents.set("east", 1);
    const fleet = new UpFleet({
      server,
      clusters: [{ name: "east", agentCertFile: pki.paths.agent.cert }],
      probeEveryMs: 5,
      pollMs: 3_600_000,
    });
    await fleet.start();
    for (let i = 0; i < 3; i++) {
      await waitUntil("a probe", () => server.probes.length === 1);
      server.answer("east", { ok: true, ms: 1 });
    }
    await waitUntil("a probe", () => server.probes.length === 1);
    fleet.close();
    const calls = server.probeCalls;
    server.answer("east", { ok: true, ms: 1 });
    await new Promise((r) => setTimeout(r, 30));
    assert.equal(server.probeCalls, calls, "no probe after close");
  });

  test("traffic: the server's counters become requests, errors, bytes and open streams of the current bucket", async () => {
    const server = new FakeServer();
    server.agents.set("east", 1);
    const t = Date.parse("2026-11-26T10:00:02Z");
    const fleet = fleetOf(server, () => t);
    await fleet.start();
    try {
      server.traffic.set("east", { ...zero(), dials: 2, failedDials: 1, bytesToAgent: 100, bytesFromAgent: 1000 });
      fleet.poll();
      server.traffic.set("east", {
        dials: 5,
        failedDials: 1,
        bytesToAgent: 150,
        bytesFromAgent: 3000,
        openConnections: 2,
      });
      fleet.poll();
      const detail = fleet.model.detail("east", true);
      const last = detail?.series.at(-1);
      assert.deepEqual(last, {
        t: Date.parse("2026-11-26T10:00:00Z"),
        requests: 6,
        errors: 1,
        bytesIn: 150,
        bytesOut: 3000,
      });
      assert.equal(detail?.openStreams, 2);
      assert.deepEqual(detail?.audit, [], "up has no audit records");
      // A counter that went down restarted: what it reads now is new.
      server.traffic.set("east", { ...zero(), dials: 1 });
      fleet.poll();
      assert.equal(fleet.model.detail("east", false)?.series.at(-1)?.requests, 7);
    } finally {
      fleet.close();
    }
  });
});

describe("up's fleet page", () => {
  test("/ redirects to the page; everyone sees every cluster and the (empty) audit view", async () => {
    const server = new FakeServer();
    server.agents.set("east", 1);
    const fleet = fleetOf(server);
    await fleet.start();
    const http = await startUpFleetHttp({ model: fleet.model, host: "127.0.0.1", port: 0, assets: new Map() });
    try {
      assert.match(http.url, /^http:\/\/127\.0\.0\.1:\d+\/-\/fleet\/$/);
      const origin = new URL(http.url).origin;
      const root = await fetch(`${origin}/`, { redirect: "manual" });
      assert.equal(root.status, 302);
      assert.equal(root.headers.get("location"), "/-/fleet/");
      assert.equal((await fetch(`${origin}/elsewhere`)).status, 404);
      const snapshot = (await (await fetch(`${http.url}api/clusters`)).json()) as FleetSnapshot;
      assert.deepEqual(
        snapshot.clusters.map((r) => r.cluster),
        ["east", "west"],
      );
      assert.equal(snapshot.audit, true);
      const detail = (await (await fetch(`${http.url}api/clusters/east`)).json()) as ClusterDetail;
      assert.deepEqual(detail.audit, []);
    } finally {
      await http.close();
      fleet.close();
    }
  });
});
