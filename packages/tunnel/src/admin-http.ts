/**
 * The request handlers of a component's health port (`/healthz`, `/readyz`, the deprecated
 * `/ready`, `/metrics`) and admin port (`/metrics`, and with --enable-profiling
 * {@link PROCESS_STATS_PATH}), shared by the proxy-server and the proxy-agent. Each component
 * keeps its own readiness rule and texts (they follow the Go binaries') and its own listeners.
 */
import type * as http from "node:http";
import { PROCESS_STATS_PATH, processStatsHandler } from "./process-stats.js";

/** What `/metrics` renders: a prom-client `Registry` is one. */
export interface MetricsRegistry {
  metrics(): Promise<string>;
  readonly contentType: string;
}

/** The answer to a readiness probe. */
export interface ProbeAnswer {
  status: number;
  body: string;
}

/** What the health port reads from its component. */
export interface HealthPortSource {
  registry: MetricsRegistry;
  /** The answer to `/readyz` and `/ready`; `verbose` is set by the `?verbose` query parameter. */
  readiness(verbose: boolean): ProbeAnswer;
}

/** Send a complete plain-text (or `contentType`) response with its length. */
function reply(
  res: http.ServerResponse,
  status: number,
  body: string,
  contentType = "text/plain; charset=utf-8",
): void {
  res.writeHead(status, { "content-type": contentType, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function serveMetrics(registry: MetricsRegistry, res: http.ServerResponse): void {
  registry.metrics().then(
    (text) => reply(res, 200, text, registry.contentType),
    (err: unknown) => reply(res, 500, `cannot collect metrics: ${err instanceof Error ? err.message : String(err)}\n`),
  );
}

/** The path and query of a request (an absolute-form target is reduced to its path). */
function requestUrl(req: http.IncomingMessage): URL {
  return new URL(req.url ?? "/", "http://localhost");
}

/** Request handler of the health port. */
export function healthPortHandler(source: HealthPortSource): http.RequestListener {
  return (req, res) => {
    const url = requestUrl(req);
    switch (url.pathname) {
      case "/healthz":
        return reply(res, 200, "ok");
      case "/readyz":
      case "/ready": {
        const { status, body } = source.readiness(url.searchParams.has("verbose"));
        return reply(res, status, body);
      }
      case "/metrics":
        return serveMetrics(source.registry, res);
      default:
        return reply(res, 404, "404 page not found\n");
    }
  };
}

/** Request handler of the admin port; `profiling` adds {@link PROCESS_STATS_PATH}. */
export function adminPortHandler(registry: MetricsRegistry, profiling = false): http.RequestListener {
  const processStats = profiling ? processStatsHandler() : undefined;
  return (req, res) => {
    const path = requestUrl(req).pathname;
    if (path === "/metrics") return serveMetrics(registry, res);
    if (processStats && path === PROCESS_STATS_PATH) return processStats(req, res);
    reply(res, 404, "404 page not found\n");
  };
}
