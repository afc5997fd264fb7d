/**
 * The fleet page as the browser suites see it, by its stable test hooks (packages/fleet/README.md):
 * a page object for this suite and for the suites that run the page against `cluster-proxy up`
 * and the gateway.
 */
import type { Locator, Page } from "playwright-core";

/** A row's availability, as `data-available` says it. */
export type Availability = "True" | "False" | "Unknown";

/** The fleet page open in a tab. */
export class FleetPage {
  constructor(readonly page: Page) {}

  /** The row of `cluster` (in the DOM only while it is in the table's window). */
  row(cluster: string): Locator {
    return this.page.locator(`[data-testid="fleet-row"][data-cluster="${cluster}"]`);
  }

  /** Wait until the table has a row for `cluster`, with `available` when given. */
  async waitRow(cluster: string, available?: Availability, timeoutMs = 5_000): Promise<void> {
    const extra = available === undefined ? "" : `[data-available="${available}"]`;
    await this.page
      .locator(`[data-testid="fleet-row"][data-cluster="${cluster}"]${extra}`)
      .waitFor({ timeout: timeoutMs });
  }

  /** Wait until the live indicator says `state`. */
  async waitLive(state: "live" | "reconnecting" = "live", timeoutMs = 5_000): Promise<void> {
    await this.page.locator(`[data-testid="live-indicator"][data-state="${state}"]`).waitFor({ timeout: timeoutMs });
  }

  /** The rows in the DOM, top to bottom, as cluster and availability. */
  async rows(): Promise<{ cluster: string; available: string }[]> {
    const out: { cluster: string; available: string }[] = [];
    for (const r of await this.page.locator('[data-testid="fleet-row"]').all())
      out.push({
        cluster: (await r.getAttribute("data-cluster")) ?? "",
        available: (await r.getAttribute("data-available")) ?? "",
      });
    return out;
  }

  /** Fill the filter box (a substring of the cluster name). */
  async filter(text: string): Promise<void> {
    await this.page.getByTestId("fleet-filter").fill(text);
  }

  /** Click the row of `cluster` and wait for its detail. */
  async openDetail(cluster: string, timeoutMs = 5_000): Promise<Locator> {
    await this.row(cluster).click();
    const detail = this.page.locator(`[data-testid="cluster-detail"][data-cluster="${cluster}"]`);
    await detail.waitFor({ timeout: timeoutMs });
    return detail;
  }

  /** The sum of requests over the open detail's 15 minutes (waits for the chart). */
  async totalRequests(timeoutMs = 5_000): Promise<number> {
    const chart = this.page.getByTestId("chart-requests");
    await chart.waitFor({ timeout: timeoutMs });
    return Number(await chart.getAttribute("data-total-requests"));
  }

  /**
   * Wait until the open detail's request total is at least `n`; answers it. A MutationObserver in
   * the page watches the attribute (waitForFunction would poll with eval, which the page's CSP
   * refuses).
   */
  async waitTotalRequests(n: number, timeoutMs = 5_000): Promise<number> {
    const value: unknown = await this.page.evaluate(`new Promise((resolve, reject) => {
      const total = () =>
        Number(document.querySelector('[data-testid="chart-requests"]')?.getAttribute("data-total-requests") ?? -1);
      if (total() >= ${n}) return resolve(total());
      const observer = new MutationObserver(() => {
        if (total() < ${n}) return;
        clearTimeout(timer);
        observer.disconnect();
        resolve(total());
      });
      const timer = setTimeout(() => {
        observer.disconnect();
        reject(new Error("the request chart shows " + total() + " requests after ${timeoutMs} ms, not ${n} or more"));
      }, ${timeoutMs});
      observer.observe(document.body, { subtree: true, childList: true, attributes: true });
    })`);
    return Number(value);
  }

  /** The open detail's audit rows. */
  auditRows(denied?: boolean): Locator {
    const extra = denied === undefined ? "" : `[data-denied="${String(denied)}"]`;
    return this.page.locator(`[data-testid="audit-row"]${extra}`);
  }

  /** Answer the token form (shown after a 401) and wait for the table. */
  async signIn(token: string, timeoutMs = 5_000): Promise<void> {
    await this.page.getByTestId("token-form").waitFor({ timeout: timeoutMs });
    await this.page.getByLabel("Bearer token").fill(token);
    await this.page.getByLabel("Bearer token").press("Enter");
    await this.page.getByTestId("fleet-table").waitFor({ timeout: timeoutMs });
  }
}
