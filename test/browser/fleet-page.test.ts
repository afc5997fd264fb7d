/**
 * The fleet page (packages/fleet/ui) in Debian's Chromium, served by the real FleetHttp on a
 * loopback port and fed by a FleetModel the test fills: 1,000 clusters render as a window of
 * rows; sorting and filtering work from the keyboard; a row change reaches the page through the
 * event stream without a reload, and the page reconnects when the stream ends; a cluster's detail
 * shows its request chart and its audit records with a denial labelled; a 401 brings the token
 * form and the token is sent; dark and light schemes. Screenshots of each state go to
 * test-artifacts/fleet/.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  FleetHttp,
  FleetModel,
  loadUiAssets,
  type FleetRequest,
  type FleetViewer,
  type UiAssets,
} from "@cluster-proxy/fleet";
import type { Page } from "playwright-core";
import { buildFleetUi } from "../../scripts/build-fleet-ui.js";
import { failIfMissing, prerequisiteSkip } from "../framework/prerequisites.js";
import { Browser, chromiumMissing } from "../framework/browser.js";
import { FleetPage } from "./fleet-page.js";
import { realClock } from "@cluster-proxy/kit";

const CLUSTERS = 1_000;
const TOKEN = "fleet-test-token";
const { skip, missing } = prerequisiteSkip(chromiumMissing());

/** mc-0001 … mc-1000. */
function name(i: number): string {
  return `mc-${String(i).padStart(4, "0")}`;
}

/** A deterministic fleet: every 7th cluster unavailable, every 11th without a latency. */
function fill(model: FleetModel, now: number): void {
  for (let i = 1; i <= CLUSTERS; i++) {
    const down = i % 7 === 0;
    model.setRow({
      cluster: name(i),
      installed: i % 97 !== 0,
      available: down ? "False" : i % 13 === 0 ? "Unknown" : "True",
      latencyMs: i % 11 === 0 || down ? null : ((i * 37) % 500) / 10 + 0.5,
      agentsByServer: down ? {} : i % 5 === 0 ? { "proxy-server-0": 1 } : { "proxy-server-0": 1, "proxy-server-1": 1 },
      serversExpected: 2,
      agentCertExpiry: new Date(now + ((i % 30) + 1) * 86_400_000).toISOString(),
      reason: down ? "no agent connected" : "",
    });
  }
}

const everyone: FleetViewer = {
  name: "test",
  visible: (c) => Promise.resolve(new Set(c)),
  auditable: (c) => Promise.resolve(new Set(c)),
};

/** A viewer who may see every cluster but no audit record. */
const noAudit: FleetViewer = { ...everyone, name: "no-audit", auditable: () => Promise.resolve(new Set()) };

async function serve(http: FleetHttp): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    if (FleetHttp.owns(req.url)) void http.handle(req, res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/-/fleet/`, server };
}

function stop(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

async function rowsInDom(page: Page): Promise<number> {
  return page.locator('[data-testid="fleet-row"]').count();
}

/**
 * Run `expression` in the page and check that it answered strings (the suite is typechecked
 * without the DOM's types, so browser code goes in as text).
 */
async function pageStrings(page: Page, expression: string): Promise<string[]> {
  const value: unknown = await page.evaluate(expression);
  assert.ok(Array.isArray(value), `${expression}: ${String(value)}`);
  return value.map(String);
}

/** The rows' values of attribute `name` in the DOM, top to bottom. */
function rowAttributes(page: Page, name: string): Promise<string[]> {
  return pageStrings(
    page,
    `[...document.querySelectorAll('[data-testid="fleet-row"]')].map((r) => r.getAttribute(${JSON.stringify(name)}) ?? "")`,
  );
}

/** The clusters of the rows in the DOM, top to bottom. */
function renderedClusters(page: Page): Promise<string[]> {
  return rowAttributes(page, "data-cluster");
}

describe("fleet page in Chromium", { skip, timeout: 180_000 }, () => {
  let browser: Browser;
  let uiDir: string;
  let assets: UiAssets;
  const offset = { ms: 0 };
  const model = new FleetModel({ clock: { ...realClock, now: () => Date.now() + offset.ms } });
  const seenAuthorization: (string | undefined)[] = [];
  let open: { url: string; server: Server; http: FleetHttp };
  let guarded: { url: string; server: Server; http: FleetHttp };

  before(async () => {
    failIfMissing(missing);
    uiDir = await mkdtemp(join(tmpdir(), "cpx-fleet-ui-"));
    const built = await buildFleetUi(uiDir);
    assert.match(built.js, /^assets\/app-[A-Z0-9]+\.js$/);
    assets = loadUiAssets(uiDir);
    fill(model, Date.now());
    const openHttp = new FleetHttp({ model, assets, identify: () => Promise.resolve({ ok: true, viewer: everyone }) });
    const guardedHttp = new FleetHttp({
      model,
      assets,
      identify: (req: FleetRequest) => {
        const auth = req.headers.authorization;
        seenAuthorization.push(auth);
        return Promise.resolve(
          auth === `Bearer ${TOKEN}`
            ? { ok: true, viewer: noAudit }
            : { ok: false, status: 401, message: "a bearer token is needed" },
        );
      },
    });
    open = { ...(await serve(openHttp)), http: openHttp };
    guarded = { ...(await serve(guardedHttp)), http: guardedHttp };
    browser = await Browser.launch();
  });

  after(async () => {
    await browser?.close();
    open?.http.close();
    guarded?.http.close();
    if (open) await stop(open.server);
    if (guarded) await stop(guarded.server);
    if (uiDir) await rm(uiDir, { recursive: true, force: true });
  });

  it("renders 1,000 clusters as a window of rows, and scrolling to the end shows the last", async () => {
    const page = await browser.open(open.url);
    await page.locator('[data-testid="live-indicator"][data-state="live"]').waitFor({ timeout: 5_000 });
    await page.locator(`[data-testid="fleet-row"][data-cluster="${name(1)}"]`).waitFor({ timeout: 5_000 });
    assert.equal(await page.getByTestId("fleet-count").textContent(), `${CLUSTERS} of ${CLUSTERS} clusters`);
    const before = await rowsInDom(page);
    assert.ok(before > 5 && before < 100, `rows in the DOM: ${before}`);
    await browser.screenshot(page, "table");
    await page.evaluate(
      `(() => { const el = document.querySelector('[data-testid="fleet-scroll"]'); el.scrollTo(0, el.scrollHeight); })()`,
    );
    const last = page.locator(`[data-testid="fleet-row"][data-cluster="${name(CLUSTERS)}"]`);
    await last.waitFor({ timeout: 5_000 });
    assert.ok(await last.isVisible());
    const atEnd = await rowsInDom(page);
    assert.ok(atEnd < 100, `rows in the DOM at the end: ${atEnd}`);
    assert.ok(!(await renderedClusters(page)).includes(name(1)), "the first row left the DOM");
    await browser.screenshot(page, "table-end");
    assert.deepEqual(browser.pageErrors(page), [], "no console error (no CSP violation)");
    await page.close();
  });

  it("sorts by latency and filters from the keyboard", async () => {
    const page = await browser.open(open.url);
    await page.locator('[data-testid="fleet-row"]').first().waitFor({ timeout: 5_000 });

    // Tab from the page's start reaches the filter first.
    await page.keyboard.press("Tab");
    assert.equal(await page.locator(":focus").getAttribute("data-testid"), "fleet-filter");
    await page.keyboard.type("mc-00");
    await page
      .getByTestId("fleet-count")
      .filter({ hasText: `99 of ${CLUSTERS} clusters` })
      .waitFor({ timeout: 5_000 });
    await page.keyboard.press("Tab");
    assert.equal(await page.locator(":focus").getAttribute("data-testid"), "fleet-only-unavailable");
    await page.keyboard.press("Space");
    const down = Array.from({ length: 99 }, (_, k) => k + 1).filter((i) => i % 7 === 0 || i % 13 === 0).length;
    await page
      .getByTestId("fleet-count")
      .filter({ hasText: `${down} of ${CLUSTERS} clusters` })
      .waitFor({ timeout: 5_000 });
    for (const r of await rowAttributes(page, "data-available")) assert.notEqual(r, "True");
    await browser.screenshot(page, "filtered");
    await page.keyboard.press("Space");
    await page.getByTestId("fleet-filter").fill("");

    // Enter on the latency header's button sorts ascending, Space again descending.
    await page.getByTestId("sort-latency").focus();
    await page.keyboard.press("Enter");
    await page
      .locator('th[aria-sort="ascending"]', { has: page.getByTestId("sort-latency") })
      .waitFor({ timeout: 5_000 });
    const latencies = [...Array(CLUSTERS).keys()]
      .map((k) => model.row(name(k + 1)))
      .flatMap((r) => (r && r.latencyMs !== null ? [{ c: r.cluster, l: r.latencyMs }] : []))
      .sort((a, b) => a.l - b.l || (a.c < b.c ? -1 : 1));
    const top = await renderedClusters(page);
    assert.deepEqual(
      top.slice(0, 5),
      latencies.slice(0, 5).map((x) => x.c),
    );
    await page.keyboard.press("Space");
    await page
      .locator('th[aria-sort="descending"]', { has: page.getByTestId("sort-latency") })
      .waitFor({ timeout: 5_000 });
    const topDesc = await renderedClusters(page);
    // The slowest first (ties stay in name order).
    const slowest = latencies.at(-1)?.l;
    assert.equal(topDesc[0], latencies.find((x) => x.l === slowest)?.c);
    await browser.screenshot(page, "sorted-latency");

    // Rows: arrows move between them, Enter opens the detail, Escape closes it.
    await page.locator('[data-testid="fleet-row"]').first().focus();
    await page.keyboard.press("ArrowDown");
    const focused = topDesc[1] ?? "";
    await page.locator(`tr[data-cluster="${focused}"]:focus`).waitFor({ timeout: 5_000 });
    await page.keyboard.press("Enter");
    await page.getByTestId("cluster-detail").waitFor({ timeout: 5_000 });
    assert.equal(new URL(page.url()).hash, `#/cluster/${focused}`);
    await page.keyboard.press("Escape");
    await page.getByTestId("cluster-detail").waitFor({ state: "detached", timeout: 5_000 });
    // Focus is back on the row.
    await page.locator(`tr[data-cluster="${focused}"]:focus`).waitFor({ timeout: 5_000 });
    await page.close();
  });

  it("shows a row's change through the event stream within 2 s, without a reload", async () => {
    const page = await browser.open(open.url);
    const fleet = new FleetPage(page);
    await fleet.waitRow(name(1), "True");
    await page.evaluate(`document.body.setAttribute("data-loaded-once", "yes")`);
    const previous = model.row(name(1));
    assert.ok(previous);
    const changedAt = Date.now();
    model.setRow({ ...previous, available: "False", agentsByServer: {}, reason: "agent stopped" });
    await fleet.waitRow(name(1), "False", 2_000);
    const took = Date.now() - changedAt;
    assert.ok(took < 2_000, `took ${took} ms`);
    assert.equal(await page.locator("body").getAttribute("data-loaded-once"), "yes");
    await browser.screenshot(page, "row-unavailable");
    model.setRow(previous);
    await fleet.waitRow(name(1), "True", 2_000);
    await page.close();
  });

  it("says reconnecting when the stream ends, and is live again after the backoff", async () => {
    const page = await browser.open(open.url);
    const live = page.locator('[data-testid="live-indicator"][data-state="live"]');
    await live.waitFor({ timeout: 5_000 });
    open.http.close();
    await page.locator('[data-testid="live-indicator"][data-state="reconnecting"]').waitFor({ timeout: 5_000 });
    await browser.screenshot(page, "reconnecting");
    // The first retry comes after 1 s; the table stays as it was meanwhile.
    assert.ok((await rowsInDom(page)) > 0);
    await live.waitFor({ timeout: 5_000 });
    await page.close();
  });

  it("shows a cluster's request chart and its audit records with a denial labelled", async () => {
    const cluster = name(2);
    // Traffic over the last minutes: 3 buckets in the past, then the current one.
    let total = 0;
    for (const [ago, requests] of [
      [120_000, 10],
      [60_000, 4],
      [30_000, 7],
    ] as const) {
      offset.ms = -ago;
      model.recordTraffic(cluster, { requests, errors: 1, bytesIn: requests * 300, bytesOut: requests * 2_000 });
      total += requests;
    }
    offset.ms = 0;
    model.recordAudit(cluster, {
      time: new Date(Date.now() - 20_000).toISOString(),
      user: "system:serviceaccount:default:viewer",
      verb: "list",
      resource: "namespaces",
      status: 200,
      durationMs: 4.2,
      denied: false,
    });
    model.recordAudit(cluster, {
      time: new Date(Date.now() - 10_000).toISOString(),
      user: "mallory",
      verb: "create",
      resource: "pods/exec",
      status: 403,
      durationMs: 1.1,
      denied: true,
      reason: "no RBAC rule allows create on pods/exec",
    });
    model.recordAudit(cluster, {
      time: new Date().toISOString(),
      user: "alice",
      verb: "get",
      resource: "",
      path: "/healthz",
      status: 200,
      durationMs: 2,
      denied: false,
    });

    const page = await browser.open(open.url);
    const fleet = new FleetPage(page);
    await fleet.openDetail(cluster);
    assert.equal(new URL(page.url()).hash, `#/cluster/${cluster}`);
    const chart = page.getByTestId("chart-requests");
    await chart.waitFor({ timeout: 5_000 });
    assert.equal(await fleet.totalRequests(), total);
    // uPlot draws after the chart's container is in the DOM.
    await chart.locator("canvas").waitFor({ timeout: 5_000 });
    const rows = fleet.auditRows();
    assert.equal(await rows.count(), 3);
    const denied = fleet.auditRows(true);
    assert.equal(await denied.count(), 1);
    assert.match((await denied.textContent()) ?? "", /mallory.*pods\/exec.*403.*denied/i);
    assert.match((await rows.first().textContent()) ?? "", /alice.*\/healthz/);
    await browser.screenshot(page, "detail");
    await denied.scrollIntoViewIfNeeded();
    await browser.screenshot(page, "detail-audit");
    assert.deepEqual(browser.pageErrors(page), [], "no console error (no CSP violation)");

    // New traffic moves the chart without a reload (a `detail` event).
    model.recordTraffic(cluster, { requests: 5 });
    assert.equal(await fleet.waitTotalRequests(total + 5, 2_000), total + 5);

    // A linkable detail: opening the URL with its hash shows the same cluster.
    const linked = await browser.open(`${open.url}#/cluster/${cluster}`);
    await linked.locator(`[data-testid="cluster-detail"][data-cluster="${cluster}"]`).waitFor({ timeout: 5_000 });
    await linked.locator('[data-testid="audit-row"]').first().waitFor({ timeout: 5_000 });
    await linked.close();

    // A cluster that does not exist (or that the viewer may not see) says so.
    const nowhere = await browser.open(`${open.url}#/cluster/no-such-cluster`);
    await nowhere.getByTestId("detail-missing").waitFor({ timeout: 5_000 });
    await nowhere.close();
    await page.close();
  });

  it("asks for a token on 401, sends it, and shows the fleet (without the audit view)", async () => {
    const page = await browser.open(guarded.url);
    const fleet = new FleetPage(page);
    const form = page.getByTestId("token-form");
    await form.waitFor({ timeout: 5_000 });
    assert.match((await form.textContent()) ?? "", /kubectl create token/);
    await browser.screenshot(page, "token-form");
    await fleet.signIn(TOKEN);
    await fleet.waitRow(name(1));
    assert.ok(seenAuthorization.includes(`Bearer ${TOKEN}`));
    assert.equal(await page.evaluate('sessionStorage.getItem("cluster-proxy.fleet.token")'), TOKEN);
    await fleet.openDetail(name(3));
    await page.getByTestId("audit-hidden").waitFor({ timeout: 5_000 });
    assert.match((await page.getByTestId("audit-hidden").textContent()) ?? "", /managedclusters\/proxy-audit/);
    await browser.screenshot(page, "token-accepted-no-audit");
    await page.close();

    // A page opened with the header already set (a proxy in front) needs no form.
    const withHeader = await browser.open(guarded.url, { authorization: `Bearer ${TOKEN}` });
    await withHeader.locator('[data-testid="fleet-row"]').first().waitFor({ timeout: 5_000 });
    await withHeader.close();
  });

  it("follows the system's dark and light schemes", async () => {
    const luminance = (page: Page): Promise<number> =>
      pageStrings(page, "[getComputedStyle(document.body).backgroundColor]").then(([color = ""]) => {
        const m = /rgba?\((\d+), (\d+), (\d+)/.exec(color);
        return m ? (Number(m[1]) + Number(m[2]) + Number(m[3])) / 3 : -1;
      });
    for (const colorScheme of ["dark", "light"] as const) {
      const page = await browser.open(`${open.url}#/cluster/${name(2)}`, { colorScheme });
      await page.getByTestId("chart-requests").waitFor({ timeout: 5_000 });
      const l = await luminance(page);
      if (colorScheme === "dark") assert.ok(l >= 0 && l < 60, `dark background ${l}`);
      else assert.ok(l > 200, `light background ${l}`);
      await browser.screenshot(page, `detail-${colorScheme}`);
      await page.keyboard.press("Escape");
      await page.getByTestId("cluster-detail").waitFor({ state: "detached", timeout: 5_000 });
      await browser.screenshot(page, `table-${colorScheme}`);
      await page.close();
    }
  });
});
