/**
 * The health port (`/healthz`, `/readyz`, deprecated `/ready`, `/metrics`) and the admin port
 * (`/metrics`, and `/debug/process` with --enable-profiling), with the Go server's texts.
 */
import * as http from "node:http";
import { PROCESS_STATS_PATH, processStatsHandler } from "@cluster-proxy/tunnel";
import type { Registry } from "prom-client";

export interface HealthSource {
  /** Ready iff the first proxy strategy holds at least one backend. */
  ready(): boolean;
  registry: Registry;
}

function reply(
  res: http.ServerResponse,
  status: number,
  body: string,
  contentType = "text/plain; charset=utf-8",
): void {
  res.writeHead(status, { "content-type": contentType, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

async function serveMetrics(res: http.ServerResponse, registry: Registry): Promise<void> {
  try {
    reply(res, 200, await registry.metrics(), registry.contentType);
  } catch (err) {
    reply(res, 500, `cannot collect metrics: ${(err as Error).message}\n`);
  }
}

/** Create (not start) the health HTTP server. */
export function createHealthServer(source: HealthSource): http.Server {
  return http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0];
    switch (path) {
      case "/healthz":
        reply(res, 200, "ok");
        return;
      case "/readyz":
      case "/ready":
        if (source.ready()) reply(res, 200, "ok");
        else reply(res, 500, "no connection to any proxy agent");
        return;
      case "/metrics":
        void serveMetrics(res, source.registry);
        return;
      default:
        reply(res, 404, "404 page not found\n");
    }
  });
}

/** Create (not start) the admin HTTP server; `profiling` adds {@link PROCESS_STATS_PATH}. */
export function createAdminServer(registry: Registry, profiling = false): http.Server {
  const processStats = profiling ? processStatsHandler() : undefined;
  return http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0];
    if (path === "/metrics") void serveMetrics(res, registry);
    else if (processStats && path === PROCESS_STATS_PATH) processStats(req, res);
    else reply(res, 404, "404 page not found\n");
  });
}
