/**
 * The agent's HTTP ports, served with the tunnel package's handlers. Health port: `/healthz`
 * (alive), `/readyz` and the deprecated `/ready` (200 iff at least one server is connected, else
 * 503 with the reason, in Go's texts), `/metrics`. Admin port: `/metrics` (served directly rather
 * than redirected as Go does) and, with --enable-profiling, `/debug/process`.
 */
import * as http from "@cluster-proxy/tunnel/http";
import type { AddressInfo } from "node:net";
import { ConfigError } from "@cluster-proxy/api";
import type { ProbeAnswer } from "@cluster-proxy/tunnel";

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
