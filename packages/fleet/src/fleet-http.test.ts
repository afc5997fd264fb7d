import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { FleetHttp, type FleetLimits, type FleetViewer, type ViewerResult } from "./fleet-http.js";
import { FleetModel, type RowReport } from "./fleet-model.js";
import type { ClusterDetail, FleetSnapshot } from "./fleet-types.js";
import { readFleetEvents, type FleetEvents } from "./testing/event-reader.js";
import { loadUiAssets } from "./ui-assets.js";

const row = (cluster: string, over: Partial<RowReport> = {}): RowReport => ({
  cluster,
  installed: true,
  available: "True",
  latencyMs: 2,
  agentsByServer: { s1: 1 },
  serversExpected: 1,
  agentCertExpiry: null,
  reason: "",
  ...over,
});

/** Viewers by bearer token: alice sees east (with its audit), bob sees everything, no audit. */
function viewerFor(token: string | undefined): ViewerResult {
  const of = (name: string, sees: (c: string) => boolean, audits: (c: string) => boolean): ViewerResult => {
    const viewer: FleetViewer = {
      name,
      visible: (cs) => Promise.resolve(new Set(cs.filter(sees))),
      auditable: (cs) => Promise.resolve(new Set(cs.filter(audits))),
    };
    return { ok: true, viewer };
  };
  if (token === "alice")
    return of(
      "alice",
      (c) => c === "east",
      () => true,
    );
  if (token === "bob")
    return of(
      "bob",
      () => true,
      () => false,
    );
  return { ok: false, status: 401, message: "a hub token is needed" };
}

interface Served {
  port: number;
  model: FleetModel;
  fleet: FleetHttp;
  close(): Promise<void>;
}

async function serve(limits: Partial<FleetLimits> = {}, assetsDir?: string): Promise<Served> {
  const model = new FleetModel();
  model.setRow(row("east"));
  model.setRow(row("west"));
  const fleet = new FleetHttp({
    model,
    limits: { coalesceMs: 20, ...limits },
    assets: assetsDir === undefined ? new Map() : loadUiAssets(assetsDir),
    identify: (req) => Promise.resolve(viewerFor(/^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1])),
  });
  const server = http.createServer((req, res) => {
    if (FleetHttp.owns(req.url)) void fleet.handle(req, res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    model,
    fleet,
    close: async () => {
      fleet.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

async function get(port: number, path: string, token?: string, method = "GET") {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method,
    redirect: "manual",
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
  return { status: res.status, headers: res.headers, body: await res.text() };
}

/** An event stream of `token`'s viewer. */
function openEvents(port: number, token: string, query = ""): FleetEvents {
  return readFleetEvents(
    http.get({
      host: "127.0.0.1",
      port,
      path: `/-/fleet/api/events${query}`,
      headers: { authorization: `Bearer ${token}` },
    }),
  );
}

describe("fleet routes", () => {
  let s: Served;
  before(async () => (s = await serve()));
  after(() => s.close());

  test("a viewer sees only the clusters it may; another cluster answers like a missing one", async () => {
    const alice = JSON.parse((await get(s.port, "/-/fleet/api/clusters", "alice")).body) as FleetSnapshot;
    assert.deepEqual(
      alice.clusters.map((r) => r.cluster),
      ["east"],
    );
    assert.equal(alice.audit, true);
    const bob = JSON.parse((await get(s.port, "/-/fleet/api/clusters", "bob")).body) as FleetSnapshot;
    assert.deepEqual(
      bob.clusters.map((r) => r.cluster),
      ["east", "west"],
    );
    assert.equal(bob.audit, false);
    const hidden = await get(s.port, "/-/fleet/api/clusters/west", "alice");
    const missing = await get(s.port, "/-/fleet/api/clusters/nowhere", "alice");
    assert.equal(hidden.status, 404);
    assert.deepEqual([hidden.status, hidden.body], [missing.status, missing.body]);
    const detail = JSON.parse((await get(s.port, "/-/fleet/api/clusters/east", "alice")).body) as ClusterDetail;
    assert.equal(detail.row.cluster, "east");
    assert.deepEqual(detail.audit, []);
    const noAudit = JSON.parse((await get(s.port, "/-/fleet/api/clusters/east", "bob")).body) as ClusterDetail;
    assert.equal(noAudit.audit, null);
  });

  test("no token: 401 with a bearer challenge; bad input and methods are refused with a reason", async () => {
    const anon = await get(s.port, "/-/fleet/api/clusters");
    assert.equal(anon.status, 401);
    assert.equal(anon.headers.get("www-authenticate"), "Bearer");
    assert.equal((await get(s.port, "/-/fleet/api/clusters", "alice", "POST")).status, 405);
    assert.equal((await get(s.port, "/-/fleet/api/clusters/%E0%A4%A", "bob")).status, 404);
    assert.equal((await get(s.port, "/-/fleet/api/clusters/..%2Fetc", "bob")).status, 404);
    assert.equal((await get(s.port, "/-/fleet/api/nothing", "bob")).status, 404);
    const badCluster = await get(s.port, "/-/fleet/api/events?cluster=Not_A_Name", "bob");
    assert.equal(badCluster.status, 400);
    assert.match(badCluster.body, /cluster=/);
    const redirect = await get(s.port, "/-/fleet");
    assert.deepEqual([redirect.status, redirect.headers.get("location")], [308, "fleet/"]);
  });

  test("every answer carries the security headers; an unbuilt page says how to build it", async () => {
    const page = await get(s.port, "/-/fleet/");
    assert.equal(page.status, 503);
    assert.match(page.body, /npm run build/);
    for (const path of ["/-/fleet/", "/-/fleet/api/clusters"]) {
      const { headers } = await get(s.port, path, "bob");
      assert.match(headers.get("content-security-policy") ?? "", /default-src 'none'; script-src 'self'/);
      assert.equal(headers.get("x-content-type-options"), "nosniff");
      assert.equal(headers.get("referrer-policy"), "no-referrer");
    }
  });

  test("a change reaches an open stream as a new snapshot, filtered for the viewer", async () => {
    const alice = openEvents(s.port, "alice", "?cluster=east");
    const bob = openEvents(s.port, "bob");
    try {
      assert.equal(await alice.opened, 200);
      await alice.waitFor((e) => (e.name === "snapshot" ? true : undefined));
      await alice.waitFor((e) => (e.name === "detail" ? true : undefined));
      await bob.waitFor((e) => (e.name === "snapshot" ? true : undefined));
      s.model.setRow(row("west", { available: "False", agentsByServer: {}, reason: "no agent" }));
      const west = await bob.waitFor((e) =>
        e.name === "snapshot" ? (e.data as FleetSnapshot).clusters.find((r) => r.available === "False") : undefined,
      );
      assert.equal(west.cluster, "west");
      s.model.recordTraffic("east", { requests: 3 });
      const d = await alice.waitFor((e) =>
        e.name === "detail" && (e.data as ClusterDetail).series.at(-1)!.requests === 3 ? true : undefined,
      );
      assert.ok(d);
      assert.equal(
        alice.events.filter((e) => e.name === "snapshot").length,
        1,
        "west's change is not alice's: no snapshot for her",
      );
    } finally {
      alice.close();
      bob.close();
      s.model.setRow(row("west"));
    }
  });
});

describe("fleet limits, attacked while a legitimate viewer keeps its events", () => {
  test("one viewer cannot hold more than its streams, nor all viewers more than the total", async () => {
    const s = await serve({ streamsPerViewer: 3, streams: 5 });
    const opened: ReturnType<typeof openEvents>[] = [];
    try {
      for (let i = 0; i < 3; i++) opened.push(openEvents(s.port, "alice"));
      assert.deepEqual(await Promise.all(opened.map((o) => o.opened)), [200, 200, 200]);
      const refused = await get(s.port, "/-/fleet/api/events", "alice");
      assert.equal(refused.status, 429);
      assert.match(refused.body, /alice \(at most 3\)/);
      const legit = openEvents(s.port, "bob");
      opened.push(legit);
      assert.equal(await legit.opened, 200);
      opened.push(openEvents(s.port, "bob"));
      await opened.at(-1)!.opened;
      const full = await get(s.port, "/-/fleet/api/events", "bob");
      assert.equal(full.status, 429);
      assert.match(full.body, /on this server \(at most 5\)/);
      s.model.setRow(row("west", { available: "False" }));
      await legit.waitFor((e) =>
        e.name === "snapshot" && (e.data as FleetSnapshot).clusters.some((r) => r.available === "False")
          ? true
          : undefined,
      );
      for (const o of opened.splice(0, 3)) o.close();
      const deadline = Date.now() + 5_000;
      while (s.fleet.openStreams > 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const again = openEvents(s.port, "alice");
      opened.push(again);
      assert.equal(await again.opened, 200, "closed streams are given back");
    } finally {
      for (const o of opened) o.close();
      await s.close();
    }
  });

  test("a viewer that does not read is cut; another keeps getting events", async () => {
    const s = await serve({ maxBufferedBytes: 64 * 1024, coalesceMs: 0 });
    for (let i = 0; i < 200; i++) s.model.setRow(row(`c${i}`, { reason: "x".repeat(200) }));
    const legit = openEvents(s.port, "bob");
    const stalled = net.connect(s.port, "127.0.0.1");
    try {
      await new Promise<void>((r) => stalled.once("connect", r));
      stalled.write("GET /-/fleet/api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n\r\n");
      stalled.pause();
      await legit.opened;
      // Alice sees only east: change east's row over and over so her stream has something to send.
      let n = 0;
      const deadline = Date.now() + 20_000;
      while (s.fleet.openStreams < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      const closed = (): boolean => s.fleet.openStreams < 2;
      while (!closed() && Date.now() < deadline) {
        s.model.setRow(row("east", { latencyMs: n++, reason: "y".repeat(4000) }));
        await new Promise((r) => setImmediate(r));
      }
      assert.ok(closed(), "the stalled stream was cut");
      s.model.setRow(row("west", { available: "False" }));
      await legit.waitFor((e) =>
        e.name === "snapshot" &&
        (e.data as FleetSnapshot).clusters.some((r) => r.cluster === "west" && r.available === "False")
          ? true
          : undefined,
      );
    } finally {
      legit.close();
      stalled.destroy();
      await s.close();
    }
  });
});

test("the built page and its assets are served with their types and caching", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleet-ui-"));
  try {
    mkdirSync(join(dir, "assets"));
    writeFileSync(join(dir, "index.html"), "<!doctype html><title>fleet</title>");
    writeFileSync(join(dir, "assets", "app-0123abcd.js"), "console.log(1)");
    const s = await serve({}, dir);
    try {
      const page = await get(s.port, "/-/fleet/");
      assert.equal(page.status, 200);
      assert.equal(page.headers.get("cache-control"), "no-cache");
      assert.match(page.headers.get("content-type") ?? "", /text\/html/);
      const js = await get(s.port, "/-/fleet/assets/app-0123abcd.js");
      assert.equal(js.status, 200);
      assert.match(js.headers.get("cache-control") ?? "", /immutable/);
      assert.match(js.headers.get("content-type") ?? "", /javascript/);
      assert.equal((await get(s.port, "/-/fleet/assets/../index.html")).status, 200, "dot segments are resolved");
      assert.equal((await get(s.port, "/-/fleet/assets/missing.js")).status, 404);
    } finally {
      await s.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
