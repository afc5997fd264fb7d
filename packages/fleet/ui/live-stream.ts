/**
 * The page's one event stream (`GET api/events`, or `api/events?cluster=<name>` while a cluster's
 * detail is open): read with `fetch` so the bearer token can be sent, parsed by {@link SseParser},
 * reconnected with backoff (1 s doubling to 10 s) when it fails or goes quiet.
 */
import type { ClusterDetail, FleetSnapshot } from "../src/fleet-types.js";
import { authHeaders } from "./auth.js";
import { isClusterDetail, isFleetSnapshot } from "./json-guards.js";
import { SseParser } from "./sse-parser.js";

/** Whether the page is receiving updates. */
export type LiveState = "live" | "reconnecting";

/** What a {@link LiveStream} tells the page. */
export interface LiveHandlers {
  snapshot(s: FleetSnapshot): void;
  /** A `detail` event; null when the cluster does not exist or the viewer may not see it. */
  detail(d: ClusterDetail | null): void;
  /** The connection's state changed; `why` says what failed when reconnecting. */
  state(state: LiveState, why: string): void;
  /** The server answered 401: the stream stopped until the page starts a new one with a token. */
  unauthorized(): void;
}

/** First wait before reconnecting, ms. */
export const BACKOFF_FIRST_MS = 1_000;
/** Longest wait before reconnecting, ms. */
export const BACKOFF_MAX_MS = 10_000;
/** The server sends a ping every 15 s; a stream silent this long is dead. */
export const QUIET_LIMIT_MS = 40_000;

/** The stream's URL, relative to the page (which lives at `/-/fleet/`). */
export function eventsUrl(cluster: string | null): string {
  return cluster === null ? "api/events" : `api/events?cluster=${encodeURIComponent(cluster)}`;
}

/** One event stream with reconnection; `stop()` ends it for good. */
export class LiveStream {
  private stopped = false;
  private controller: AbortController | null = null;
  private wake: (() => void) | null = null;

  constructor(
    private readonly url: string,
    private readonly token: string | null,
    private readonly on: LiveHandlers,
  ) {}

  /** Connect, and keep connecting until stopped or told 401. */
  start(): void {
    this.run().catch((e: unknown) => this.on.state("reconnecting", String(e)));
  }

  /** Close the stream and cancel any pending reconnection. */
  stop(): void {
    this.stopped = true;
    this.controller?.abort();
    this.wake?.();
  }

  private async run(): Promise<void> {
    let backoff = BACKOFF_FIRST_MS;
    while (!this.stopped) {
      const end = await this.connect();
      if (end === "final" || this.stopped) return;
      if (end === "was-live") backoff = BACKOFF_FIRST_MS;
      await this.sleep(backoff);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }

  /** One connection: "final" when the stream must not reconnect, else whether it ever was live. */
  private async connect(): Promise<"final" | "was-live" | "failed"> {
    const controller = new AbortController();
    this.controller = controller;
    let quiet: ReturnType<typeof setTimeout> | undefined;
    const arm = (): void => {
      clearTimeout(quiet);
      quiet = setTimeout(() => controller.abort(), QUIET_LIMIT_MS);
    };
    let wasLive = false;
    try {
      arm();
      const headers = { accept: "text/event-stream", ...authHeaders(this.token) };
      const res = await fetch(this.url, { headers, signal: controller.signal, cache: "no-store" });
      if (res.status === 401) {
        this.on.unauthorized();
        return "final";
      }
      if (!res.ok || res.body === null) {
        const text = (await res.text().catch(() => "")).trim().split("\n")[0] ?? "";
        this.on.state("reconnecting", `${res.status}${text === "" ? "" : `: ${text}`}`);
        return "failed";
      }
      wasLive = true;
      this.on.state("live", "");
      const parser = new SseParser();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        arm();
        for (const ev of parser.push(value)) this.dispatch(ev.event, ev.data);
      }
      if (!this.stopped) this.on.state("reconnecting", "the stream ended");
    } catch (e) {
      if (!this.stopped) this.on.state("reconnecting", e instanceof Error ? e.message : String(e));
    } finally {
      clearTimeout(quiet);
      controller.abort();
    }
    return wasLive ? "was-live" : "failed";
  }

  private dispatch(event: string, data: string): void {
    if (this.stopped) return;
    let value: unknown;
    try {
      value = JSON.parse(data);
    } catch {
      return;
    }
    if (event === "snapshot" && isFleetSnapshot(value)) this.on.snapshot(value);
    else if (event === "detail" && (value === null || isClusterDetail(value))) this.on.detail(value);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done(): void {
        clearTimeout(t);
        resolve();
      }
      this.wake = done;
    });
  }
}
