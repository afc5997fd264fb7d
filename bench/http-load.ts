/**
 * Small-GET load for bench/gateway.ts: ways to send one request (on a keep-alive agent, or on a
 * new single-use tunnel with its own TLS session), and a closed loop of concurrent senders over a
 * time window that records each request's latency.
 */
import * as http from "node:http";
import type * as http2 from "node:http2";
import * as https from "node:https";
import type { Duplex } from "node:stream";
import * as tls from "node:tls";
import { errorMessage } from "@cluster-proxy/errors";

/**
 * Sends one request and resolves once its whole answer arrived with status 200; `signal` aborts
 * it (the request and its connection are destroyed).
 */
export type Send = (signal: AbortSignal) => Promise<void>;

/** What each request asks for: the path (with the query) and the headers. */
export interface RequestSpec {
  path: string;
  headers: http.OutgoingHttpHeaders;
}

/** Read `res` to its end; reject unless the status is 200. */
function drain(res: http.IncomingMessage, resolve: () => void, reject: (err: Error) => void): void {
  let body = "";
  res.setEncoding("utf8");
  res.on("data", (c: string) => {
    if (body.length < 512) body += c;
  });
  res.on("end", () => {
    if (res.statusCode === 200) resolve();
    else reject(new Error(`HTTP ${res.statusCode}: ${body.slice(0, 200).trim()}`));
  });
  res.on("error", reject);
}

/**
 * A GET of `spec` to `host:port` through `agent` (an https.Agent with keep-alive; its TLS options
 * are those of the connection), so consecutive requests reuse the agent's connections.
 */
export function keepAliveGet(agent: https.Agent, host: string, port: number, spec: RequestSpec): Send {
  return (signal) =>
    new Promise<void>((resolve, reject) => {
      const req = https.request(
        { agent, host, port, method: "GET", path: spec.path, headers: spec.headers, signal },
        (res) => drain(res, resolve, reject),
      );
      req.on("error", reject);
      req.end();
    });
}

/**
 * A GET of `spec` as one HTTP/2 stream that `open` gives (the gateway's session to an agent
 * endpoint, `ClusterSessions.request`), read to its end; rejects unless the status is 200.
 */
export function streamGet(
  open: (headers: http2.OutgoingHttpHeaders, signal: AbortSignal) => Promise<http2.ClientHttp2Stream>,
  authority: string,
  spec: RequestSpec,
): Send {
  return async (signal) => {
    const headers: http2.OutgoingHttpHeaders = {
      ":method": "GET",
      ":path": spec.path,
      ":scheme": "https",
      ":authority": authority,
    };
    for (const [name, value] of Object.entries(spec.headers))
      if (value !== undefined) headers[name.toLowerCase()] = value;
    const stream = await open(headers, signal);
    await new Promise<void>((resolve, reject) => {
      let status = 0;
      let body = "";
      stream.setEncoding("utf8");
      stream.on("response", (h) => (status = Number(h[":status"])));
      stream.on("data", (c: string) => {
        if (body.length < 512) body += c;
      });
      stream.on("end", () => {
        if (status === 200) resolve();
        else reject(new Error(`HTTP ${status}: ${body.slice(0, 200).trim()}`));
      });
      stream.on("error", reject);
      stream.on("close", () => reject(new Error(`the stream closed (HTTP/2 code ${stream.rstCode})`)));
      signal.addEventListener("abort", () => stream.close(), { once: true });
    });
  };
}

/**
 * A GET of `spec` on a connection of its own: `open` gives a new stream (a single-use tunnel),
 * TLS runs on it with `tlsOptions`, one request with `Connection: close`, and the stream is
 * destroyed. The model of a client that opens a tunnel per request.
 */
export function perConnectionGet(
  open: (signal: AbortSignal) => Promise<Duplex>,
  tlsOptions: tls.ConnectionOptions,
  spec: RequestSpec,
  host: string,
): Send {
  return async (signal) => {
    const stream = await open(signal);
    const socket = tls.connect({ ...tlsOptions, socket: stream });
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once("error", reject);
        const req = http.request(
          {
            createConnection: () => socket,
            host,
            method: "GET",
            path: spec.path,
            headers: { ...spec.headers, connection: "close" },
            signal,
          },
          (res) => drain(res, resolve, reject),
        );
        req.on("error", reject);
        req.end();
      });
    } finally {
      socket.destroy();
      stream.destroy();
    }
  };
}

/** One window of load: every request's latency, and what failed. */
export interface LoadWindow {
  concurrency: number;
  /** Wall time of the window (s). */
  seconds: number;
  /** Latency of each request that succeeded (ms), in completion order. */
  latencyMs: number[];
  errors: number;
  lastError: string;
}

/** Limits of {@link runLoad}: a window ends at `durationMs`, `maxRequests` started, or `maxErrors` failed. */
export interface LoadLimits {
  durationMs: number;
  maxRequests: number;
  maxErrors: number;
  /** Limit of one request (ms). */
  requestTimeoutMs: number;
}

/**
 * `concurrency` senders, each sending its next request as soon as the last one finished (a closed
 * loop), until a limit of `limits` is reached.
 */
export async function runLoad(send: Send, concurrency: number, limits: LoadLimits): Promise<LoadWindow> {
  const latencyMs: number[] = [];
  let errors = 0;
  let lastError = "";
  let started = 0;
  const t0 = performance.now();
  const end = t0 + limits.durationMs;
  const worker = async (): Promise<void> => {
    while (performance.now() < end && started < limits.maxRequests && errors < limits.maxErrors) {
      started++;
      const r0 = performance.now();
      try {
        await send(AbortSignal.timeout(limits.requestTimeoutMs));
        latencyMs.push(performance.now() - r0);
      } catch (e) {
        errors++;
        lastError = errorMessage(e);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, () => worker()));
  return { concurrency, seconds: (performance.now() - t0) / 1000, latencyMs, errors, lastError };
}
