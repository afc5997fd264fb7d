/**
 * The fleet view served by a running gateway (fake hub, fake agent endpoint): viewers see only the
 * clusters the hub lets them reach (one review without a name for a hub admin, none per cluster),
 * the audit view needs `managedclusters/proxy-audit`, the gateway's own requests feed the traffic
 * and audit records (a denial shows as denied), pass-through tokens are refused, and a caller that
 * hammers the API for clusters it may not see gets 404 and 429 and learns nothing while a
 * legitimate viewer keeps getting its events; a viewer's reviews are kept per viewer, so repeated
 * page loads cost a bounded number of SubjectAccessReviews.
 */
import assert from "node:assert/strict";
import * as https from "node:https";
import { after, before, describe, test } from "node:test";
import type { ClusterDetail, FleetSnapshot } from "@cluster-proxy/fleet";
import { readFleetEvents, type FleetEvents } from "@cluster-proxy/fleet/testing";
import { Authenticator } from "../authentication.js";
import { FleetViewers } from "./fleet-viewers.js";
import { FakeHub } from "../testing/fake-hub.js";
import { startGatewayFixture, type GatewayFixture } from "../testing/gateway-fixture.js";

const GROUP = "cluster.open-cluster-management.io";
const user = (username: string) => ({ username, groups: ["system:authenticated"], extra: {} });
const condition = (status: "True" | "False", message: string) => ({
  status,
  reason: status === "True" ? "ProxyAgentAvailable" : "ProxyAgentUnavailable",
  message,
  lastTransitionTime: "2026-11-26T20:00:00Z",
});

/** An event stream of the gateway's fleet view, read as the page reads it (a bearer token). */
function openEvents(f: GatewayFixture, token: string, query = ""): FleetEvents {
  return readFleetEvents(
    https.get({
      host: "127.0.0.1",
      port: f.port,
      path: `/-/fleet/api/events${query}`,
      ca: f.servingCa,
      agent: false,
      headers: { authorization: `Bearer ${token}` },
    }),
  );
}

describe("the gateway's fleet view", () => {
  let f: GatewayFixture;
  const get = async (path: string, token?: string) => {
    const r = await f.request(path, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    return { ...r, json: (): unknown => JSON.parse(r.body) };
  };
  const snapshot = async (token: string): Promise<FleetSnapshot> =>
    (await get("/-/fleet/api/clusters", token)).json() as FleetSnapshot;

  before(async () => {
    f = await startGatewayFixture({ fleet: { probeIntervalMs: 200 } });
    const h = f.hub;
    for (const name of ["alice", "admin", "audrey", "mallory"]) h.tokens.set(name, user(name));
    h.grantProxy("alice", "mc1", "get");
    h.grant("admin", { group: GROUP, resource: "managedclusters", subresource: "proxy", verb: "get" });
    h.grant("admin", { group: GROUP, resource: "managedclusters", subresource: "proxy-audit", verb: "get" });
    h.grantProxy("audrey", "mc2", "get");
    h.grant("audrey", {
      group: GROUP,
      resource: "managedclusters",
      subresource: "proxy-audit",
      name: "mc2",
      verb: "get",
    });
    h.setAddOn("mc1", condition("True", "tunnel works through 1 of 1 proxy-server (s1)"));
    h.setAddOn("mc2", condition("True", "tunnel works through 1 of 1 proxy-server (s1)"));
  });
  after(() => f.close());

  test("a viewer sees the clusters the hub lets it reach, probed through the tunnel with the gateway identity", async () => {
    const deadline = Date.now() + 10_000;
    let alice = await snapshot("alice");
    while (alice.clusters[0]?.latencyMs == null && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      alice = await snapshot("alice");
    }
    assert.deepEqual(
      alice.clusters.map((r) => r.cluster),
      ["mc1"],
    );
    assert.equal(alice.audit, false);
    const row = alice.clusters[0]!;
    assert.equal(row.installed, true);
    assert.equal(row.available, "True");
    assert.equal(typeof row.latencyMs, "number", "the endpoint probe (mutual TLS with the identity) answered");
    assert.ok(row.agentCertExpiry && Date.parse(row.agentCertExpiry) > Date.now(), "the agent certificate's expiry");
    assert.deepEqual(row.agentsByServer, { s1: 1 });
    assert.ok(f.endpoint.dialed.includes("gateway.cluster-proxy.invalid.mc1:443"));
    assert.ok(
      f.endpoint.clientSubjects.some((s) => s.includes("CN=cluster-proxy-gateway")),
      "the endpoint accepted the identity",
    );

    const hidden = await get("/-/fleet/api/clusters/mc2", "alice");
    const missing = await get("/-/fleet/api/clusters/nowhere", "alice");
    assert.equal(hidden.status, 404);
    assert.deepEqual([hidden.status, hidden.body], [missing.status, missing.body]);
    const own = (await get("/-/fleet/api/clusters/mc1", "alice")).json() as ClusterDetail;
    assert.equal(own.audit, null, "no proxy-audit: no audit view");
  });

  test("a hub admin: one review without a name, none per cluster", async () => {
    const before = f.hub.accessReviews.length;
    const admin = await snapshot("admin");
    assert.deepEqual(
      admin.clusters.map((r) => r.cluster),
      ["mc1", "mc2"],
    );
    assert.equal(admin.audit, true);
    const mine = f.hub.accessReviews.slice(before).filter((r) => r.user.username === "admin");
    assert.ok(mine.length <= 2, `at most one review per question: ${JSON.stringify(mine)}`);
    assert.ok(mine.every((r) => r.attributes.name === undefined));
  });

  test("no credentials: 401; the page itself needs none", async () => {
    const anon = await get("/-/fleet/api/clusters");
    assert.equal(anon.status, 401);
    assert.equal(anon.headers["www-authenticate"], "Bearer");
    const page = await get("/-/fleet/");
    assert.equal(page.status, 503, "not built in this test: the page's own answer, without a token");
    assert.match(String(page.headers["content-security-policy"]), /default-src 'none'/);
  });

  test("the gateway's requests feed the cluster's traffic and audit records; a denial shows as denied", async () => {
    const ok = await f.request("/mc1/api/v1/namespaces", { headers: { authorization: "Bearer alice" } });
    assert.equal(ok.status, 200);
    const denied = await f.request("/mc2/api/v1/namespaces", { headers: { authorization: "Bearer alice" } });
    assert.equal(denied.status, 403);
    const mc2 = (await get("/-/fleet/api/clusters/mc2", "audrey")).json() as ClusterDetail;
    const entry = mc2.audit?.find((e) => e.user === "alice");
    assert.ok(entry, `alice's denial in mc2's audit view: ${JSON.stringify(mc2.audit)}`);
    assert.deepEqual([entry.status, entry.denied, entry.verb, entry.resource], [403, true, "list", "namespaces"]);
    assert.match(entry.reason ?? "", /may not "get" managedclusters\/proxy "mc2"/);
    const mc1 = (await get("/-/fleet/api/clusters/mc1", "admin")).json() as ClusterDetail;
    assert.ok(mc1.series.reduce((n, p) => n + p.requests, 0) >= 1);
    assert.ok(mc1.series.reduce((n, p) => n + p.bytesOut, 0) > 0);
    const made = await f.request("/made-up/api", { headers: { authorization: "Bearer admin" } });
    assert.equal(made.status, 403, "the fake hub grants admin no named cluster");
    assert.equal((await get("/-/fleet/api/clusters/made-up", "admin")).status, 404, "no row for a made-up cluster");
  });

  test("a caller hammering clusters it may not see gets 404 and 429 and learns nothing; a viewer keeps its events", async () => {
    const legit = openEvents(f, "alice", "?cluster=mc1");
    const opened: FleetEvents[] = [];
    try {
      assert.equal(await legit.opened, 200);
      await legit.waitFor((e) => (e.name === "snapshot" ? true : undefined));
      const answers = await Promise.all(
        Array.from({ length: 40 }, (_, i) => get(`/-/fleet/api/clusters/${i % 2 ? "mc2" : "mc1"}`, "mallory")),
      );
      assert.ok(answers.every((a) => a.status === 404));
      assert.equal(new Set(answers.map((a) => a.body)).size, 1, "the same answer for every cluster");
      for (let i = 0; i < 8; i++) opened.push(openEvents(f, "mallory", "?cluster=mc2"));
      assert.deepEqual(await Promise.all(opened.map((o) => o.opened)), Array(8).fill(200));
      const refused = await get("/-/fleet/api/events", "mallory");
      assert.equal(refused.status, 429);
      const seen = await opened[0]!.waitFor((e) => (e.name === "detail" ? e : undefined));
      assert.equal(seen.data, null, "mc2's detail is not mallory's to see");
      const hers = await opened[0]!.waitFor((e) => (e.name === "snapshot" ? (e.data as FleetSnapshot) : undefined));
      assert.deepEqual(hers.clusters, []);
      assert.equal(hers.audit, false);

      f.hub.setAddOn("mc1", condition("False", "tunnel works through 0 of 1 proxy-server; s1 (10.0.0.1): no agent"));
      await legit.waitFor((e) =>
        e.name === "snapshot" && (e.data as FleetSnapshot).clusters.some((r) => r.available === "False")
          ? true
          : undefined,
      );
      assert.ok(
        opened.every((o) =>
          o.events.every((e) => e.name !== "snapshot" || (e.data as FleetSnapshot).clusters.length === 0),
        ),
      );
    } finally {
      legit.close();
      for (const o of opened) o.close();
    }
  });
});

test("pass-through tokens are refused by the fleet view (401), hub tokens and certificates are not", async () => {
  const hub = new FakeHub();
  hub.tokens.set("hub-token", user("alice"));
  const viewers = new FleetViewers({
    authenticator: new Authenticator({ hub, tokenReview: true, cacheTtlMs: 1000, passthroughUnrecognizedTokens: true }),
    hub,
    cacheTtlMs: 1000,
    certificateOf: () => undefined,
  });
  const pass = await viewers.identify({ headers: { authorization: "Bearer not-the-hubs" } });
  assert.equal(pass.ok, false);
  assert.equal(!pass.ok && pass.status, 401);
  const alice = await viewers.identify({ headers: { authorization: "Bearer hub-token" } });
  assert.ok(alice.ok);
  hub.grantProxy("alice", "mc1", "get");
  assert.deepEqual([...(await alice.viewer.visible(["mc1", "mc2"]))], ["mc1"]);
  const reviews = hub.accessReviews.map((r) => r.attributes.name ?? "*");
  assert.deepEqual(reviews.sort(), ["*", "mc1", "mc2"], "one review without a name first, then one per cluster");
  await alice.viewer.visible(["mc1", "mc2"]);
  assert.equal(hub.accessReviews.length, 3, "decisions are cached, denials too");
  hub.failAccessReview = true;
  await assert.rejects(alice.viewer.auditable(["mc1"]), /SubjectAccessReview failed/);
});

describe("the fleet view's reviews over repeated page loads", () => {
  let f: GatewayFixture;
  const clusters = Array.from({ length: 20 }, (_, i) => `c${String(i).padStart(2, "0")}`);
  before(async () => {
    f = await startGatewayFixture();
    for (const c of clusters) {
      f.hub.addCluster(c);
      f.hub.setAddOn(c, condition("True", "tunnel works through 1 of 1 proxy-server (s1)"));
    }
    f.hub.tokens.set("viewer", user("viewer"));
    f.hub.grantProxy("viewer", "c03", "get");
    f.hub.grantProxy("viewer", "c07", "get");
    f.hub.grant("viewer", {
      group: GROUP,
      resource: "managedclusters",
      subresource: "proxy-audit",
      name: "c03",
      verb: "get",
    });
  });
  after(() => f.close());

  test("a viewer's reviews are kept for --fleet-authorization-cache-ttl: one round per period, however many loads", async () => {
    const reviews = (): number => f.hub.accessReviews.filter((r) => r.user.username === "viewer").length;
    const load = async (): Promise<void> => {
      const snap = JSON.parse(
        (await f.request("/-/fleet/api/clusters", { headers: { authorization: "Bearer viewer" } })).body,
      ) as FleetSnapshot;
      assert.deepEqual(
        snap.clusters.map((r) => r.cluster),
        ["c03", "c07"],
      );
      assert.equal(snap.audit, true);
      const detail = await f.request("/-/fleet/api/clusters/c03", { headers: { authorization: "Bearer viewer" } });
      assert.ok((JSON.parse(detail.body) as ClusterDetail).audit, "c03's audit records");
      assert.equal(
        (await f.request("/-/fleet/api/clusters/c04", { headers: { authorization: "Bearer viewer" } })).status,
        404,
      );
    };
    const all = f.gateway.fleetModel.clusterNames().length;
    // One round: a review without a name per question, one per cluster to see, one per visible cluster for audit.
    const round = 1 + all + 1 + 2;
    for (let i = 0; i < 10; i++) {
      await load();
      f.advance(2_500); // 25 s in all: past the TTL of cluster requests' decisions (5 s), within the view's (30 s)
    }
    assert.ok(reviews() <= round, `${reviews()} reviews for 10 loads (one round: ${round})`);
    f.advance(10_000);
    for (let i = 0; i < 5; i++) await load();
    assert.ok(reviews() <= 2 * round, `${reviews()} reviews after the period (two rounds: ${2 * round})`);
  });
});
