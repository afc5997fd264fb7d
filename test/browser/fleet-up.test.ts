/**
 * The fleet view of `cluster-proxy up` in Debian's Chromium: up runs in this process (its own port
 * base and state directory) and the test opens the address its ready screen prints. East and west
 * are listed as available; east's agent stopped (through up's test seam, CliContext.upAgents)
 * turns its row unavailable within 5 s and restarted available again; the curl line the ready
 * screen prints for east moves east's request chart. Screenshots of each state go to
 * test-artifacts/fleet/up-*.png. Needs the built page (`npm run build`).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { UpNotReady, startUpInProcess, type InProcessUp } from "@cluster-proxy/cli/testing";
import { UI_DIR } from "@cluster-proxy/fleet";
import { canListen, waitUntil } from "@cluster-proxy/tunnel/testing";
import type { Page } from "playwright-core";
import { failIfMissing, prerequisiteSkip } from "../framework/prerequisites.js";
import { Browser, chromiumMissing } from "../framework/browser.js";

const run = promisify(execFile);
const pageMissing = existsSync(join(UI_DIR, "index.html"))
  ? undefined
  : "the fleet page is not built (npm run build writes packages/fleet/dist/ui)";
const { skip, missing } = prerequisiteSkip(chromiumMissing() ?? pageMissing);

/** A port base whose 17 ports (base..base+16) are free, below the ephemeral range. */
async function freeBase(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const base = 10_000 + Math.floor(Math.random() * 20_000);
    let free = true;
    for (let p = base; free && p <= base + 16; p++) free = await canListen(p);
    if (free) return base;
  }
  throw new Error("no free port range");
}

/** `up` in this process on a free port base; another run taking a port between the check and the bind is retried. */
async function startUp(stateDir: string): Promise<InProcessUp> {
  const failures: string[] = [];
  for (let attempt = 0; attempt < 3; attempt++) {
    const base = await freeBase();
    try {
      return await startUpInProcess(["--port-base", String(base), "--state-dir", stateDir, "--log-level", "silent"]);
    } catch (err) {
      if (!(err instanceof UpNotReady)) throw err;
      assert.match(err.output, /already in use/, err.message);
      failures.push(err.output.slice(-500));
    }
  }
  throw new Error(`up found no free ports in 3 attempts:\n${failures.join("\n---\n")}`);
}

const row = (page: Page, cluster: string, available: string) =>
  page.locator(`[data-testid="fleet-row"][data-cluster="${cluster}"][data-available="${available}"]`);

describe("up's fleet view in Chromium", { skip, timeout: 180_000 }, () => {
  let stateDir: string;
  let up: InProcessUp | undefined;
  let browser: Browser | undefined;

  before(async () => {
    failIfMissing(missing);
    stateDir = await mkdtemp(join(tmpdir(), "cpx-fleet-up-"));
    up = await startUp(stateDir);
    browser = await Browser.launch({ width: 1200, height: 700 });
  });

  after(async () => {
    await browser?.close();
    if (up) assert.equal(await up.stop(), 0, up.output());
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("lists east and west available, follows east's agent going and coming back, and east's curl moves its chart", async () => {
    assert.ok(up && browser);
    const screen = up.output();
    const address = /^Fleet view \(live\): (http:\/\/\S+)$/m.exec(screen)?.[1];
    assert.ok(address, `the ready screen names the fleet view:\n${screen}`);
    const curl = /^ {2}(curl -p -x http:\/\/\S+ http:\/\/east:80\/)$/m.exec(screen)?.[1];
    assert.ok(curl, `the ready screen has east's plain curl line:\n${screen}`);

    const page = await browser.open(address);
    await row(page, "east", "True").waitFor({ timeout: 10_000 });
    await row(page, "west", "True").waitFor({ timeout: 10_000 });
    await browser.screenshot(page, "up-available");

    await up.agents.stop("east");
    const stopped = Date.now();
    await row(page, "east", "False").waitFor({ timeout: 5_000 });
    const took = Date.now() - stopped;
    assert.ok(took < 5_000, `east unavailable after ${took} ms`);
    assert.equal(await row(page, "west", "True").count(), 1, "west stays available");
    await browser.screenshot(page, "up-east-stopped");

    await up.agents.start("east");
    await row(page, "east", "True").waitFor({ timeout: 15_000 });
    await browser.screenshot(page, "up-east-restarted");

    await row(page, "east", "True").click();
    const chart = page.locator(
      '[data-testid="cluster-detail"][data-cluster="east"] [data-testid="chart-requests"][data-total-requests]',
    );
    await chart.waitFor({ timeout: 5_000 });
    const before = Number(await chart.getAttribute("data-total-requests"));
    const answer = await run("sh", ["-c", curl], { timeout: 15_000 });
    assert.match(answer.stdout, /hello from east/);
    await waitUntil(
      "east's request chart to count the curl",
      async () => Number(await chart.getAttribute("data-total-requests")) > before,
      { timeoutMs: 10_000, everyMs: 100 },
    );
    await browser.screenshot(page, "up-east-traffic");
    await page.close();
  });
});
