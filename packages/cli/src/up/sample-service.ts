/**
 * The sample HTTP service `cluster-proxy up` runs "inside" each demo cluster: it answers every
 * request with `hello from <cluster>` and what it saw of the request, so a user can tell which
 * cluster a request reached and how it arrived.
 */
import { once } from "node:events";
import * as http from "@cluster-proxy/kit/http";
import type { AddressInfo } from "node:net";
import { attachStandin, type StandinOptions } from "./standin-apiserver.js";

/** A running sample service. */
export interface SampleService {
  cluster: string;
  /** Loopback port it listens on. */
  port: number;
  close(): Promise<void>;
}

/** The body the sample service of `cluster` answers `req` with. */
export function sampleResponseBody(cluster: string, req: http.IncomingMessage): string {
  return [
    `hello from ${cluster}`,
    `method: ${req.method ?? ""}`,
    `path: ${req.url ?? ""}`,
    `host: ${req.headers.host ?? ""}`,
    `user-agent: ${req.headers["user-agent"] ?? ""}`,
    `seen from: ${req.socket.remoteAddress ?? ""}:${req.socket.remotePort ?? ""}`,
    "",
  ].join("\n");
}

/**
 * Start the sample service of `cluster` on an ephemeral port of 127.0.0.1; with `standin`, TLS
 * connections to the same port reach a stand-in kube-apiserver (standin-apiserver.ts).
 */
export async function startSampleService(cluster: string, standin?: StandinOptions): Promise<SampleService> {
  const server = http.createServer((req, res) => {
    req.resume();
    const body = sampleResponseBody(cluster, req);
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
  const apiserver = standin ? attachStandin(server, standin) : undefined;
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    cluster,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        apiserver?.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
