/**
 * Relaying an admitted request to its cluster's gateway endpoint over the cluster's pooled
 * connections: the request body streams up, the response streams down as it arrives (watches,
 * logs), and an upgrade (`Connection: Upgrade`: SPDY, WebSocket) becomes a two-way byte relay
 * with half-close. Failures become one-line answers naming the cluster and the cause: no tunnel
 * 503, dial timeout 504, the endpoint or its target 502.
 */
import * as http from "node:http";
import * as https from "node:https";
import type { Duplex, Readable } from "node:stream";
import { ConnectError, DialError } from "@cluster-proxy/client";
import { GATEWAY_ENDPOINT_HOST, type ClusterAgent } from "./cluster-pool.js";
import { GatewayError } from "./gateway-error.js";

/** Response headers that do not cross to the caller (hop-by-hop; HTTP/2 refuses them). */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
]);

/** The GatewayError a failed exchange with `cluster`'s endpoint answers with. */
export function relayError(cluster: string, err: unknown): GatewayError {
  const e = err instanceof Error ? err : new Error(String(err));
  if (e instanceof GatewayError) return e;
  if (e instanceof DialError) {
    if (e.reason === "timeout")
      return new GatewayError(
        504,
        "dial-timeout",
        `cluster "${cluster}": dial through the tunnel timed out: ${e.message}`,
        { cause: e },
      );
    if (e.reason === "endpoint" && /no agent/i.test(e.message))
      return new GatewayError(503, "no-tunnel", `cluster "${cluster}" has no connected agent: ${e.message}`, {
        cause: e,
      });
    if (e.reason === "endpoint")
      return new GatewayError(
        502,
        "endpoint-error",
        `cluster "${cluster}": the agent could not open its gateway endpoint: ${e.message}`,
        {
          cause: e,
        },
      );
    return new GatewayError(503, "no-tunnel", `cluster "${cluster}": the tunnel failed: ${e.message}`, { cause: e });
  }
  if (e instanceof ConnectError)
    return new GatewayError(503, "no-tunnel", `cluster "${cluster}": cannot reach the proxy-servers: ${e.message}`, {
      cause: e,
    });
  return new GatewayError(502, "endpoint-error", `cluster "${cluster}": gateway endpoint error: ${e.message}`, {
    cause: e,
  });
}

/** What to send. */
export interface RelayRequest {
  cluster: string;
  agent: ClusterAgent;
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
}

function endpointRequest(r: RelayRequest): http.ClientRequest {
  return https.request({
    agent: r.agent,
    host: GATEWAY_ENDPOINT_HOST,
    port: 443,
    method: r.method,
    path: r.path,
    headers: { ...r.headers, host: GATEWAY_ENDPOINT_HOST },
  });
}

/** The response headers that go to the caller. */
export function responseHeaders(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const out: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

/** The caller's side of a plain request (HTTP/1.1 or HTTP/2 compatibility objects). */
export interface CallerExchange {
  body: Readable;
  /** Send the response head. */
  writeHead(status: number, headers: http.OutgoingHttpHeaders): void;
  /** Write a body chunk; false when the caller's buffer is full. */
  write(chunk: Buffer): boolean;
  end(): void;
  /** Abort the caller's response (after its head was sent). */
  destroy(): void;
  onDrain(fn: () => void): void;
  /** Called once when the caller goes away or the response ended. */
  onClose(fn: () => void): void;
  headersSent(): boolean;
  writableEnded(): boolean;
}

/**
 * Relay one request; resolves with the status sent (rejects with a GatewayError when nothing
 * was sent yet). `count` gets the bytes each way.
 */
export function relayRequest(
  r: RelayRequest,
  caller: CallerExchange,
  count: { in(n: number): void; out(n: number): void },
): Promise<number> {
  return new Promise((resolve, reject) => {
    const up = endpointRequest(r);
    let settled = false;
    const fail = (err: unknown): void => {
      if (settled) return;
      settled = true;
      if (caller.headersSent()) {
        caller.destroy();
        resolve(502);
      } else reject(relayError(r.cluster, err));
    };
    up.on("error", fail);
    caller.body.on("data", (c: Buffer) => count.in(c.length));
    caller.body.pipe(up);
    caller.onClose(() => {
      if (!caller.writableEnded()) up.destroy();
    });
    up.on("response", (res) => {
      caller.writeHead(res.statusCode ?? 502, responseHeaders(res.headers));
      res.on("data", (c: Buffer) => {
        count.out(c.length);
        if (!caller.write(c)) {
          res.pause();
          caller.onDrain(() => res.resume());
        }
      });
      res.on("end", () => {
        caller.end();
        if (!settled) {
          settled = true;
          resolve(res.statusCode ?? 502);
        }
      });
      res.on("error", fail);
      res.on("aborted", () => fail(new Error("the endpoint closed the response early")));
    });
  });
}

/** Write a one-line error response on a raw socket (an upgrade request that was refused). */
export function writeRawError(socket: Duplex, err: GatewayError): void {
  const body = `${err.message}\n`;
  socket.end(
    `HTTP/1.1 ${err.status} ${http.STATUS_CODES[err.status] ?? ""}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function rawHead(status: number, message: string, headers: string[]): string {
  const lines = [`HTTP/1.1 ${status} ${message}`];
  for (let i = 0; i + 1 < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}

/**
 * Relay an upgrade: send the request, and when the endpoint answers 101 splice the caller's
 * socket and the endpoint's both ways (each direction ends on its own: half-close). A non-101
 * answer is relayed as it is and the caller's connection closed. Resolves with the status when
 * the exchange is over (for 101: when both directions ended).
 */
export function relayUpgrade(
  r: RelayRequest,
  client: Duplex,
  head: Buffer,
  count: { in(n: number): void; out(n: number): void },
  track: (socket: Duplex) => void,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const up = endpointRequest(r);
    let answered = false;
    up.on("error", (err) => {
      if (!answered) {
        answered = true;
        reject(relayError(r.cluster, err));
      }
    });
    client.on("error", () => up.destroy());
    // A caller gone before the endpoint answered: abandon the request.
    client.once("close", () => {
      if (!answered) up.destroy(new Error("the caller closed the connection"));
    });
    up.on("response", (res) => {
      answered = true;
      client.write(
        rawHead(
          res.statusCode ?? 502,
          res.statusMessage ?? "",
          res.rawHeaders.filter((_, i, a) => i % 2 === 1 || !HOP_BY_HOP.has(a[i]!.toLowerCase())),
        ),
      );
      res.on("data", (c: Buffer) => count.out(c.length));
      res.pipe(client);
      res.on("end", () => resolve(res.statusCode ?? 502));
      res.on("error", () => {
        client.destroy();
        resolve(502);
      });
    });
    up.on("upgrade", (res, endpoint: Duplex, endpointHead: Buffer) => {
      answered = true;
      if (client.destroyed) {
        endpoint.destroy();
        resolve(101);
        return;
      }
      endpoint.allowHalfOpen = true;
      track(endpoint);
      client.write(rawHead(101, res.statusMessage ?? "Switching Protocols", res.rawHeaders));
      if (endpointHead.length) {
        count.out(endpointHead.length);
        client.write(endpointHead);
      }
      if (head.length) {
        count.in(head.length);
        endpoint.write(head);
      }
      let open = 2;
      const oneDone = (): void => {
        if (--open === 0) resolve(101);
      };
      client.on("data", (c: Buffer) => count.in(c.length));
      endpoint.on("data", (c: Buffer) => count.out(c.length));
      client.pipe(endpoint);
      endpoint.pipe(client);
      client.once("end", oneDone);
      endpoint.once("end", oneDone);
      let closed = false;
      const closeBoth = (): void => {
        if (closed) return;
        closed = true;
        client.destroy();
        endpoint.destroy();
        resolve(101);
      };
      client.once("close", closeBoth);
      endpoint.once("close", closeBoth);
      endpoint.on("error", closeBoth);
    });
    up.end();
  });
}
