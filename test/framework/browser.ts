/**
 * Drives Debian's Chromium (`/usr/bin/chromium`, installed by scripts/test.sh) with playwright-core
 * for the page suites; never downloads a browser. Chromium starts headless with the flags this
 * machine needs (no sandbox as root, no GPU, no background connections to the closed network) and
 * a fresh profile in a temporary directory, removed on close. Screenshots go to
 * `test-artifacts/fleet/<name>.png`.
 */
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";

/** Debian's Chromium. */
export const CHROMIUM = "/usr/bin/chromium";
/** Where screenshots go. */
export const ARTIFACTS = join(dirname(fileURLToPath(import.meta.url)), "../../test-artifacts/fleet");
/** Chromium's flags: headless, no sandbox (root), nothing that reaches out to the network. */
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Why the browser suites cannot run here, or undefined when they can. */
export function chromiumMissing(): string | undefined {
  return existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing (scripts/test.sh installs Debian's chromium)`;
}

/** How to open a page. */
export interface OpenOptions {
  /** Sent as the `Authorization` header with every request of the page. */
  authorization?: string;
  colorScheme?: "light" | "dark";
}

/** One Chromium with a fresh profile; {@link close} ends it and removes the profile. */
export class Browser {
  private readonly errors = new WeakMap<Page, string[]>();

  private constructor(
    private readonly context: BrowserContext,
    private readonly profile: string,
  ) {}

  /** Start Chromium. */
  static async launch(
    options: {
      width?: number;
      height?: number;
      /** Another way to start Debian's Chromium (e.g. a wrapper that enters a network namespace). */
      executablePath?: string;
      /** Flags beside {@link CHROMIUM_FLAGS}. */
      args?: string[];
    } = {},
  ): Promise<Browser> {
    const profile = await mkdtemp(join(tmpdir(), "cpx-chromium-"));
    try {
      const context = await chromium.launchPersistentContext(profile, {
        executablePath: options.executablePath ?? CHROMIUM,
        headless: true,
        args: [...CHROMIUM_FLAGS, ...(options.args ?? [])],
        viewport: { width: options.width ?? 1280, height: options.height ?? 800 },
        timeout: 30_000,
      });
      return new Browser(context, profile);
    } catch (err) {
      await rm(profile, { recursive: true, force: true });
      throw err;
    }
  }

  /** Open `url` in a new tab and wait for it to load. */
  async open(url: string, options: OpenOptions = {}): Promise<Page> {
    const page = await this.context.newPage();
    const errors: string[] = [];
    this.errors.set(page, errors);
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    page.on("pageerror", (e) => errors.push(e.message));
    if (options.authorization !== undefined) await page.setExtraHTTPHeaders({ authorization: options.authorization });
    if (options.colorScheme !== undefined) await page.emulateMedia({ colorScheme: options.colorScheme });
    await page.goto(url, { waitUntil: "load", timeout: 15_000 });
    return page;
  }

  /** The page's console errors and uncaught exceptions so far (a CSP violation is one). */
  pageErrors(page: Page): string[] {
    return [...(this.errors.get(page) ?? [])];
  }

  /** Write a PNG of `page` to `test-artifacts/fleet/<name>.png`; answers its path. */
  async screenshot(page: Page, name: string): Promise<string> {
    await mkdir(ARTIFACTS, { recursive: true });
    const path = join(ARTIFACTS, `${name}.png`);
    await page.screenshot({ path });
    return path;
  }

  /** Close every page and Chromium, and remove the profile. */
  async close(): Promise<void> {
    try {
      await this.context.close();
    } finally {
      await rm(this.profile, { recursive: true, force: true });
    }
  }
}
