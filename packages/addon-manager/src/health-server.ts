/** `/healthz`, `/readyz` and `/metrics` of the addon manager on one or two listeners. */
import http from "node:http";
import { ConfigError } from "@cluster-proxy/api";
import type { Registry } from "prom-client";

export interface HealthSources {
  healthy(): { ok: boolean; detail: string };
  ready(): { ok: boolean; detail: string };
  metrics: Registry;
}

/** Parse `host:port` / `:port` (empty host: all interfaces). */
export function parseBindAddress(value: string, flag: string): { host: string; port: number } {
  const m = /^(.*):(\d+)$/.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new ConfigError(`--${flag}: "${value}" is not host:port or :port`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, "$1"), port };
}

export class HealthServer {
  private readonly servers: http.Server[] = [];
  constructor(private readonly sources: HealthSources) {}

  /** Listen on each distinct address; returns the bound ports by address. */
  async listen(
    addresses: { address: string; flag: string; paths: "health" | "metrics" | "both" }[],
  ): Promise<number[]> {
    const ports: number[] = [];
    for (const a of addresses) {
      const { host, port } = parseBindAddress(a.address, a.flag);
      const server = http.createServer((req, res) => void this.handle(req, res, a.paths));
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host === "" ? undefined : host, () => resolve());
      });
      this.servers.push(server);
      ports.push((server.address() as { port: number }).port);
    }
    return ports;
  }

  async close(): Promise<void> {
    await Promise.all(
      this.servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.close(() => resolve());
            s.closeAllConnections();
          }),
      ),
    );
  }

  private async handle(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    paths: "health" | "metrics" | "both",
  ): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const send = (code: number, body: string, type = "text/plain; charset=utf-8"): void => {
      res.writeHead(code, { "content-type": type });
      res.end(body);
    };
    if (paths !== "metrics" && (path === "/healthz" || path === "/readyz")) {
      const r = path === "/healthz" ? this.sources.healthy() : this.sources.ready();
      return send(r.ok ? 200 : 503, r.ok ? "ok\n" : `${r.detail}\n`);
    }
    if (paths !== "health" && path === "/metrics") {
      return send(200, await this.sources.metrics.metrics(), this.sources.metrics.contentType);
    }
    send(404, "not found\n");
  }
}
