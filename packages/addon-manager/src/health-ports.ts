/**
 * The addon manager's `/healthz`, `/readyz` and `/metrics` (controller-runtime's texts: `ok\n`,
 * else the reason and 503) on one or two listeners, served by the kit's endpoint server.
 */
import { ConfigError } from "@cluster-proxy/api";
import {
  closeEndpointServer,
  createEndpointServer,
  listenEndpointServer,
  metricsEndpoint,
  probeEndpoint,
  type EndpointHandler,
  type Endpoints,
  type MetricsRegistry,
} from "@cluster-proxy/kit/endpoints";
import type * as http from "node:http";

/** What the ports read from the manager. */
export interface HealthSources {
  healthy(): { ok: boolean; detail: string };
  ready(): { ok: boolean; detail: string };
  metrics: MetricsRegistry;
}

/** Which endpoints one listener serves. */
export type HealthPortPaths = "health" | "metrics" | "both";

/** The body of a 404 (controller-runtime's, not Go's `404 page not found`). */
const NOT_FOUND = "not found\n";

/** Parse `host:port` / `:port` (empty host: all interfaces). */
export function parseBindAddress(value: string, flag: string): { host: string; port: number } {
  const m = /^(.*):(\d+)$/.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new ConfigError(`--${flag}: "${value}" is not host:port or :port`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, "$1"), port };
}

function check(probe: () => { ok: boolean; detail: string }): EndpointHandler {
  return probeEndpoint(() => {
    const r = probe();
    return r.ok ? { status: 200, body: "ok\n" } : { status: 503, body: `${r.detail}\n` };
  });
}

/** The endpoints a listener serving `paths` answers. */
export function healthPortEndpoints(sources: HealthSources, paths: HealthPortPaths): Endpoints {
  const health = { "/healthz": check(() => sources.healthy()), "/readyz": check(() => sources.ready()) };
  const metrics = { "/metrics": metricsEndpoint(sources.metrics) };
  return paths === "health" ? health : paths === "metrics" ? metrics : { ...health, ...metrics };
}

/** The manager's health and metrics listeners. */
export class HealthServer {
  private readonly servers: http.Server[] = [];
  constructor(private readonly sources: HealthSources) {}

  /** Listen on each distinct address; returns the bound ports by address. */
  async listen(addresses: { address: string; flag: string; paths: HealthPortPaths }[]): Promise<number[]> {
    const ports: number[] = [];
    for (const a of addresses) {
      const { host, port } = parseBindAddress(a.address, a.flag);
      const server = createEndpointServer(healthPortEndpoints(this.sources, a.paths), NOT_FOUND);
      const listening = await listenEndpointServer(
        server,
        { host, port, flag: `--${a.flag}` },
        (message, cause) => new ConfigError(message, { cause }),
      );
      this.servers.push(server);
      ports.push(listening.address.port);
    }
    return ports;
  }

  async close(): Promise<void> {
    await Promise.all(this.servers.map((s) => closeEndpointServer(s)));
  }
}
