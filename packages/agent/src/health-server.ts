/**
 * The agent's HTTP ports. Health port: `/healthz` (alive), `/readyz` and the deprecated `/ready`
 * (200 iff at least one server is connected, else 503 with the reason), `/metrics`.
 * Admin port: `/metrics` (served directly rather than redirected as Go does) and, with
 * --enable-profiling, `/debug/process`.
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { ConfigError } from "@cluster-proxy/api";
import { PROCESS_STATS_PATH, processStatsHandler } from "@cluster-proxy/tunnel";
import type { Registry } from "prom-client";

/** What the HTTP handlers read from the agent. */
export interface HealthSource {
  registry: Registry;
  connectedServers(): string[];
}

function reply(res: http.ServerResponse, status: number, body: string, type = "text/plain; charset=utf-8"): void {
  res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function serveMetrics(source: HealthSource, res: http.ServerResponse): void {
  source.registry.metrics().then(
    (text) => reply(res, 200, text, source.registry.contentType),
    (err: unknown) => reply(res, 500, `metrics failed: ${String(err)}\n`),
  );
}

/** Request handler of the health port. */
export function healthHandler(source: HealthSource): http.RequestListener {
  return (req, res) => {
    const path = new URL(req.url ?? "/", "http://agent").pathname;
    switch (path) {
      case "/healthz":
        return reply(res, 200, "ok");
      case "/readyz":
      case "/ready": {
        // Go's readiness checks and texts: ping, server-connected; `?verbose` lists them on success.
        const servers = source.connectedServers();
        if (servers.length === 0) {
          return reply(res, 503, "[+]ping ok\n[-]server-connected failed: no servers connected\n");
        }
        const verbose = new URL(req.url ?? "/", "http://agent").searchParams.has("verbose");
        return reply(res, 200, verbose ? "[+]ping ok\n[+]server-connected ok\ncheck passed\n" : "ok");
      }
      case "/metrics":
        return serveMetrics(source, res);
      default:
        return reply(res, 404, "404 page not found\n");
    }
  };
}

/** Request handler of the admin port; `profiling` adds {@link PROCESS_STATS_PATH}. */
export function adminHandler(source: HealthSource, profiling = false): http.RequestListener {
  const processStats = profiling ? processStatsHandler() : undefined;
  return (req, res) => {
    const path = new URL(req.url ?? "/", "http://agent").pathname;
    if (path === "/metrics") return serveMetrics(source, res);
    if (processStats && path === PROCESS_STATS_PATH) return processStats(req, res);
    reply(res, 404, "404 page not found\n");
  };
}

/** Listen on host:port; a failure becomes a {@link ConfigError} naming `flag`. */
export function listenHttp(
  handler: http.RequestListener,
  host: string,
  port: number,
  flag: string,
): Promise<{ server: http.Server; address: AddressInfo }> {
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    server.once("error", (err) => {
      reject(new ConfigError(`--${flag}: cannot listen on ${host || "*"}:${port}: ${err.message}`, { cause: err }));
    });
    server.listen({ host: host || undefined, port }, () => {
      server.removeAllListeners("error");
      server.on("error", () => undefined);
      resolve({ server, address: server.address() as AddressInfo });
    });
  });
}

/** Close an HTTP port, dropping keep-alive connections. */
export function closeHttp(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
