/**
 * `@cluster-proxy/kit/endpoints`: the one HTTP server of a component's health, readiness, metrics and
 * admin endpoints; apart from the kit's main entry so that its logger or backoffs load no HTTP server.
 * Design: docs/design/architecture.md#2-the-packages-and-their-layers
 */
import type { AddressInfo } from "node:net";
import * as http from "./node-http.js";

/** What a metrics endpoint renders: a prom-client `Registry` is one. */
export interface MetricsRegistry {
  metrics(): Promise<string>;
  readonly contentType: string;
}

/** The answer to a probe (liveness or readiness). */
export interface ProbeAnswer {
  status: number;
  body: string;
}

/** Answers one path; `url` is the request's path and query (an absolute-form target reduced). */
export type EndpointHandler = (req: http.IncomingMessage, res: http.ServerResponse, url: URL) => void;

/** The endpoints of one port: path to handler. */
export type Endpoints = Readonly<Record<string, EndpointHandler>>;

/** The body of the 404 answer to a path no endpoint serves (Go's `http.NotFound`). */
export const NOT_FOUND_BODY = "404 page not found\n";

/** Send a complete plain-text (or `contentType`) response with its length. */
export function reply(
  res: http.ServerResponse,
  status: number,
  body: string,
  contentType = "text/plain; charset=utf-8",
): void {
  res.writeHead(status, { "content-type": contentType, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** An endpoint that answers with `answer(verbose)`; `verbose` is set by a `?verbose` query parameter. */
export function probeEndpoint(answer: (verbose: boolean) => ProbeAnswer): EndpointHandler {
  return (_req, res, url) => {
    const { status, body } = answer(url.searchParams.has("verbose"));
    reply(res, status, body);
  };
}

/** An endpoint that renders `registry` (500 with the reason when collecting fails). */
export function metricsEndpoint(registry: MetricsRegistry): EndpointHandler {
  return (_req, res) => {
    registry.metrics().then(
      (text) => reply(res, 200, text, registry.contentType),
      (err: unknown) =>
        reply(res, 500, `cannot collect metrics: ${err instanceof Error ? err.message : String(err)}\n`),
    );
  };
}

/** The request handler of `endpoints`; other paths get 404 with `notFound`. */
export function endpointsHandler(endpoints: Endpoints, notFound = NOT_FOUND_BODY): http.RequestListener {
  const byPath = new Map(Object.entries(endpoints));
  return (req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    const handler = byPath.get(url.pathname);
    if (handler) handler(req, res, url);
    else reply(res, 404, notFound);
  };
}

/** An HTTP server (not yet listening) that serves `endpoints`, or a request handler built from them. */
export function createEndpointServer(endpoints: Endpoints | http.RequestListener, notFound?: string): http.Server {
  return http.createServer(typeof endpoints === "function" ? endpoints : endpointsHandler(endpoints, notFound));
}

/** Where an endpoint server listens. */
export interface EndpointAddress {
  /** Host or address to bind ("" or undefined: every interface). */
  host?: string;
  /** Port (0: any free port). */
  port: number;
  /** The flag that set the address, named in a listen failure (e.g. `--health-port`). */
  flag: string;
}

/** A listening endpoint server and its bound address. */
export interface EndpointListener {
  server: http.Server;
  address: AddressInfo;
}

/** What a listen failure becomes; by default an `Error` with `message` and the cause. */
export type ListenFailure = (message: string, cause: Error) => Error;

/**
 * Listen on `at`. A failure rejects with `failure("<flag>: cannot listen on <host>:<port>: <why>")`
 * (components pass their configuration error); later server errors are ignored, as a listening
 * endpoint server has nothing to recover.
 */
export function listenEndpointServer(
  server: http.Server,
  at: EndpointAddress,
  failure: ListenFailure = (message, cause) => new Error(message, { cause }),
): Promise<EndpointListener> {
  const host = at.host ?? "";
  return new Promise((resolve, reject) => {
    server.once("error", (err) => {
      reject(failure(`${at.flag}: cannot listen on ${host || "*"}:${at.port}: ${err.message}`, err));
    });
    server.listen({ host: host || undefined, port: at.port }, () => {
      server.removeAllListeners("error");
      server.on("error", () => undefined);
      resolve({ server, address: server.address() as AddressInfo });
    });
  });
}

/** Close an endpoint server, dropping its keep-alive connections. */
export function closeEndpointServer(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
