/**
 * The fleet view's routes below `/-/fleet/`: the page and its assets (no data, no authentication), the
 * JSON API and event stream per viewer (a cluster the viewer may not see answers exactly like one that
 * does not exist), with the limits of the view.
 * Design: docs/design/fleet-view.md#limits
 */
import type { IncomingHttpHeaders } from "node:http";
import { clusterNameProblem } from "@cluster-proxy/api/cluster-name";
import { EventStream, type StreamResponse } from "./event-stream.js";
import type { FleetModel } from "./fleet-model.js";
import { FLEET_PATH, type FleetSnapshot } from "./fleet-types.js";
import { loadUiAssets, type UiAssets } from "./ui-assets.js";
import { errorMessage } from "@cluster-proxy/errors";
import { realClock, type Clock, type TimerHandle } from "@cluster-proxy/kit";

/** Who is looking, as the host decided. */
export interface FleetViewer {
  /** The viewer's name (the per-viewer stream limit counts by it). */
  name: string;
  /** Of `clusters`, the ones the viewer may see. */
  visible(clusters: readonly string[]): Promise<ReadonlySet<string>>;
  /** Of `clusters` (all visible), the ones whose audit records the viewer may see. */
  auditable(clusters: readonly string[]): Promise<ReadonlySet<string>>;
}

/** The host's answer to "who is this": a viewer, or a refusal to send as it is. */
export type ViewerResult = { ok: true; viewer: FleetViewer } | { ok: false; status: number; message: string };

/** What the routes read of a request. */
export interface FleetRequest {
  method?: string;
  url?: string;
  headers: IncomingHttpHeaders;
}

/** What the routes write (node:http's ServerResponse or the HTTP/2 compatibility response). */
export interface FleetResponse extends StreamResponse {
  writeHead(status: number, headers: Record<string, string | number>): unknown;
  end(body?: string | Buffer): unknown;
  once(event: "drain" | "close", listener: () => void): unknown;
}

/** Limits of {@link FleetHttp}; see the module comment. */
export interface FleetLimits {
  /** Event streams one viewer may hold (default 8). */
  streamsPerViewer: number;
  /** Event streams in all (default 256). */
  streams: number;
  /** Bytes a stream may have waiting for a viewer that does not read (default 1 MiB). */
  maxBufferedBytes: number;
  /** Interval of the `: ping` comment, ms (default 15 s). */
  pingMs: number;
  /** Least time between two events of one kind on a stream, ms (default 500). */
  coalesceMs: number;
  /** Interval of `detail` events when nothing changed, ms (default 5 s: the bucket width). */
  detailEveryMs: number;
}

/** The defaults of {@link FleetLimits}. */
export const DEFAULT_FLEET_LIMITS: FleetLimits = {
  streamsPerViewer: 8,
  streams: 256,
  maxBufferedBytes: 1 << 20,
  pingMs: 15_000,
  coalesceMs: 500,
  detailEveryMs: 5_000,
};

/** Options of {@link FleetHttp}. */
export interface FleetHttpOptions {
  model: FleetModel;
  /** Who sent `req` (the gateway: its authentication; up: everyone may see everything). */
  identify(req: FleetRequest): Promise<ViewerResult>;
  limits?: Partial<FleetLimits>;
  /** The page's files (default: the built page, {@link loadUiAssets}). */
  assets?: UiAssets;
  /** The time of snapshots and of the streams' coalescing (default the kit's `realClock`). */
  clock?: Clock;
}

const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
};
const NOT_BUILT = "the fleet page is not built: run npm run build (the JSON API below /-/fleet/api/ works)\n";

/** See the module comment. */
export class FleetHttp {
  private readonly limits: FleetLimits;
  private readonly assets: UiAssets;
  private readonly clock: Clock;
  private readonly streams = new Set<EventStream>();
  private readonly perViewer = new Map<string, number>();

  constructor(private readonly options: FleetHttpOptions) {
    this.limits = { ...DEFAULT_FLEET_LIMITS, ...options.limits };
    this.assets = options.assets ?? loadUiAssets();
    this.clock = options.clock ?? realClock;
  }

  /** Whether `url` is one of the fleet view's (the host hands those to {@link handle}). */
  static owns(url: string | undefined): boolean {
    return url !== undefined && (url === "/-/fleet" || url.startsWith(FLEET_PATH) || url.startsWith("/-/fleet?"));
  }

  /** Event streams open now. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** Answer a request for one of the fleet view's URLs. Never rejects. */
  async handle(req: FleetRequest, res: FleetResponse): Promise<void> {
    try {
      await this.route(req, res);
    } catch (err) {
      text(res, 500, `fleet view: ${errorMessage(err)}\n`);
    }
  }

  /** End every event stream (the host is shutting down). */
  close(): void {
    for (const s of [...this.streams]) s.close();
  }

  private async route(req: FleetRequest, res: FleetResponse): Promise<void> {
    const raw = req.url ?? "/";
    const url = new URL(raw, "http://fleet.invalid");
    const path = url.pathname;
    // What is served is what was asked for (and audited, and checked by whoever routed it here):
    // the URL parser resolves dot segments (`.`, `..`, `%2e`), turns `\` into `/` and drops tabs,
    // newlines and fragments, so a path it would change is refused instead of served as another.
    if (path !== raw.split("?")[0]) return text(res, 400, "the fleet view serves canonical paths only\n");
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { ...SECURITY_HEADERS, allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" });
      res.end("the fleet view answers GET only\n");
      return;
    }
    if (path === "/-/fleet") {
      // Relative: the page is also served below a prefix (the hub apiserver's aggregated path).
      res.writeHead(308, { ...SECURITY_HEADERS, location: "fleet/" });
      res.end();
      return;
    }
    const rest = path.slice(FLEET_PATH.length);
    if (rest === "api/clusters") return this.snapshotAnswer(req, res);
    if (rest === "api/events") return this.events(req, res, url.searchParams.get("cluster"));
    if (rest.startsWith("api/clusters/")) return this.detailAnswer(req, res, rest.slice("api/clusters/".length));
    if (rest.startsWith("api/")) return text(res, 404, "no such fleet API\n");
    const asset = this.assets.get(rest);
    if (!asset) {
      if (rest === "" && this.assets.size === 0) return text(res, 503, NOT_BUILT);
      return text(res, 404, "not found\n");
    }
    res.writeHead(200, {
      ...SECURITY_HEADERS,
      "content-type": asset.type,
      "content-length": asset.body.length,
      "cache-control": asset.cache,
    });
    res.end(req.method === "HEAD" ? undefined : asset.body);
  }

  private async viewer(req: FleetRequest, res: FleetResponse): Promise<FleetViewer | undefined> {
    const who = await this.options.identify(req);
    if (who.ok) return who.viewer;
    text(res, who.status, `${who.message}\n`, who.status === 401 ? { "www-authenticate": "Bearer" } : {});
    return undefined;
  }

  private async snapshot(viewer: FleetViewer): Promise<FleetSnapshot> {
    const { model } = this.options;
    const visible = await viewer.visible(model.clusterNames());
    const names = [...visible].filter((c) => model.has(c)).sort();
    const auditable = names.length === 0 ? new Set<string>() : await viewer.auditable(names);
    return {
      generated: new Date(this.clock.now()).toISOString(),
      clusters: names.flatMap((c) => model.row(c) ?? []),
      audit: auditable.size > 0,
    };
  }

  /** The detail of `cluster` as `viewer` may see it; undefined when it may not (or it does not exist). */
  private async detail(viewer: FleetViewer, cluster: string) {
    const { model } = this.options;
    if (!model.has(cluster) || !(await viewer.visible([cluster])).has(cluster)) return undefined;
    const withAudit = (await viewer.auditable([cluster])).has(cluster);
    return model.detail(cluster, withAudit);
  }

  private async snapshotAnswer(req: FleetRequest, res: FleetResponse): Promise<void> {
    const viewer = await this.viewer(req, res);
    if (viewer) json(res, await this.snapshot(viewer));
  }

  private async detailAnswer(req: FleetRequest, res: FleetResponse, raw: string): Promise<void> {
    const viewer = await this.viewer(req, res);
    if (!viewer) return;
    const cluster = safeDecode(raw);
    const detail =
      cluster === undefined || clusterNameProblem(cluster) ? undefined : await this.detail(viewer, cluster);
    if (detail) json(res, detail);
    else text(res, 404, "no such cluster (or you may not see it)\n");
  }

  private async events(req: FleetRequest, res: FleetResponse, cluster: string | null): Promise<void> {
    const viewer = await this.viewer(req, res);
    if (!viewer) return;
    if (cluster !== null && clusterNameProblem(cluster))
      return text(res, 400, `cluster=${JSON.stringify(cluster)}: not a cluster name\n`);
    const mine = this.perViewer.get(viewer.name) ?? 0;
    if (mine >= this.limits.streamsPerViewer)
      return text(res, 429, `too many event streams for ${viewer.name} (at most ${this.limits.streamsPerViewer})\n`);
    if (this.streams.size >= this.limits.streams)
      return text(res, 429, `too many event streams on this server (at most ${this.limits.streams})\n`);

    res.writeHead(200, {
      ...SECURITY_HEADERS,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      "x-accel-buffering": "no",
    });
    this.perViewer.set(viewer.name, mine + 1);
    const { coalesceMs } = this.limits;
    let lastSnapshot = "";
    const sendSnapshot = async (): Promise<void> => {
      const snapshot = await this.snapshot(viewer);
      const body = JSON.stringify({ ...snapshot, generated: "" });
      if (body === lastSnapshot || stream.isClosed) return;
      lastSnapshot = body;
      stream.send("snapshot", snapshot);
    };
    const sendDetail = async (): Promise<void> => {
      if (cluster === null) return;
      const detail = await this.detail(viewer, cluster);
      if (!stream.isClosed) stream.send("detail", detail ?? null);
    };
    const snapshots = new Coalescer(coalesceMs, this.clock, () => sendSnapshot().catch(() => stream.close(true)));
    const details = new Coalescer(coalesceMs, this.clock, () => sendDetail().catch(() => stream.close(true)));
    const every = cluster === null ? undefined : setInterval(() => details.trigger(), this.limits.detailEveryMs);
    every?.unref();
    const unsubscribe = this.options.model.subscribe((change) => {
      if (change.kind === "row") snapshots.trigger();
      if (cluster !== null && change.cluster === cluster) details.trigger();
    });
    const stream = new EventStream(res, this.limits.maxBufferedBytes, this.limits.pingMs, () => {
      this.streams.delete(stream);
      const n = (this.perViewer.get(viewer.name) ?? 1) - 1;
      if (n <= 0) this.perViewer.delete(viewer.name);
      else this.perViewer.set(viewer.name, n);
      unsubscribe();
      snapshots.cancel();
      details.cancel();
      clearInterval(every);
    });
    this.streams.add(stream);
    res.once("close", () => stream.close());
    await sendSnapshot();
    await sendDetail();
  }
}

/** Runs a function at most once per `ms`: at once when the window is over, else once at its end. */
class Coalescer {
  private last = 0;
  private pending: TimerHandle;

  constructor(
    private readonly ms: number,
    private readonly clock: Clock,
    private readonly run: () => unknown,
  ) {}

  trigger(): void {
    if (this.pending !== undefined) return;
    const wait = this.last + this.ms - this.clock.now();
    if (wait <= 0) this.fire();
    else this.pending = this.clock.setTimeout(() => this.fire(), wait);
  }

  cancel(): void {
    this.clock.clearTimeout(this.pending);
    this.pending = undefined;
  }

  private fire(): void {
    this.pending = undefined;
    this.last = this.clock.now();
    void this.run();
  }
}

function safeDecode(raw: string): string | undefined {
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}

function json(res: FleetResponse, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(200, {
    ...SECURITY_HEADERS,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(data),
    "cache-control": "no-store",
  });
  res.end(data);
}

function text(res: FleetResponse, status: number, body: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, {
    ...SECURITY_HEADERS,
    ...extra,
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "cache-control": "no-store",
  });
  res.end(body);
}
