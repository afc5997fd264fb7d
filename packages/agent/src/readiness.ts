/**
 * The agent's readiness rule. Its ports (served by the kit's endpoint server with the tunnel
 * package's endpoints): health port `/healthz` (alive), `/readyz` and the deprecated `/ready`
 * (200 iff at least one server is connected, else 503 with the reason, in Go's texts),
 * `/metrics`; admin port `/metrics` (served directly rather than redirected as Go does) and,
 * with --enable-profiling, `/debug/process`.
 */
import type { ProbeAnswer } from "@cluster-proxy/kit/endpoints";

/**
 * The agent's readiness answer (Go's checks and texts: ping, server-connected; `verbose` lists
 * them on success).
 */
export function agentReadiness(connectedServers: readonly string[], verbose: boolean): ProbeAnswer {
  if (connectedServers.length === 0) {
    return { status: 503, body: "[+]ping ok\n[-]server-connected failed: no servers connected\n" };
  }
  return { status: 200, body: verbose ? "[+]ping ok\n[+]server-connected ok\ncheck passed\n" : "ok" };
}
