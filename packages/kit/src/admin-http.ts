/**
 * The endpoints of a data-plane component's health port (`/healthz`, `/readyz`, the deprecated
 * `/ready`, `/metrics`) and admin port (`/metrics`, and with --enable-profiling
 * {@link PROCESS_STATS_PATH}), shared by the proxy-server, the proxy-agent and the gateway and
 * served by the kit's endpoint server. Each component keeps its own readiness rule and texts
 * (they follow the Go binaries').
 */
import type * as http from "node:http";
import {
  endpointsHandler,
  metricsEndpoint,
  probeEndpoint,
  reply,
  type Endpoints,
  type MetricsRegistry,
  type ProbeAnswer,
} from "./endpoint-server.js";
import { PROCESS_STATS_PATH, processStatsHandler } from "./process-stats.js";

/** What the health port reads from its component. */
export interface HealthPortSource {
  registry: MetricsRegistry;
  /** The answer to `/readyz` and `/ready`; `verbose` is set by the `?verbose` query parameter. */
  readiness(verbose: boolean): ProbeAnswer;
}

/** The health port's endpoints. */
export function healthPortEndpoints(source: HealthPortSource): Endpoints {
  const readiness = probeEndpoint((verbose) => source.readiness(verbose));
  return {
    "/healthz": (_req, res) => reply(res, 200, "ok"),
    "/readyz": readiness,
    "/ready": readiness,
    "/metrics": metricsEndpoint(source.registry),
  };
}

/** The admin port's endpoints; `profiling` adds {@link PROCESS_STATS_PATH}. */
export function adminPortEndpoints(registry: MetricsRegistry, profiling = false): Endpoints {
  const metrics = { "/metrics": metricsEndpoint(registry) };
  if (!profiling) return metrics;
  const processStats = processStatsHandler();
  return { ...metrics, [PROCESS_STATS_PATH]: (req, res) => processStats(req, res) };
}

/** Request handler of the health port. */
export function healthPortHandler(source: HealthPortSource): http.RequestListener {
  return endpointsHandler(healthPortEndpoints(source));
}

/** Request handler of the admin port; `profiling` adds {@link PROCESS_STATS_PATH}. */
export function adminPortHandler(registry: MetricsRegistry, profiling = false): http.RequestListener {
  return endpointsHandler(adminPortEndpoints(registry, profiling));
}
