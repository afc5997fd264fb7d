/**
 * Forwarding one gateway endpoint request (docs/design/gateway.md): the request and its body
 * stream to the upstream, the response streams back as it arrives (a watch flows chunk by chunk),
 * and an upgrade (`Connection: Upgrade`: SPDY/3.1 or WebSocket for exec, attach, port-forward) is
 * relayed: the upstream's 101 goes back and then bytes flow both ways, with half-close. Errors of
 * the endpoint itself answer 502 with one line naming the target and the cause; refused requests
 * answer 400. One log line per failure; no header values (tokens) are ever logged.
 */
import * as http from "@cluster-proxy/kit/http";
import * as https from "node:https";
import type { Duplex } from "node:stream";
import type { Logger } from "@cluster-proxy/kit";
import {
  endToEndHeaders,
  forwardedHeaders,
  gatewayTarget,
  headerPairs,
  isUpgradeRequest,
  type GatewayTarget,
  type RawHeaders,
} from "./gateway-request.js";
import type { Upstream } from "./gateway-upstreams.js";

/** What the forwarding needs. */
export interface GatewayProxyDeps {
  /** Where a target goes now (may reject: an unreadable token or CA file is a 502). */
  resolve(target: GatewayTarget): Promise<Upstream>;
  /** How long connecting to the upstream may take. */
  connectTimeoutMs: number;
  /** The prefix every impersonated user and group must carry (`--gateway-impersonation-prefix`). */
  impersonationPrefix: string;
  logger: Logger;
}

/** The one-line text of a 502. */
function badGateway(name: string, cause: string): string {
  return `gateway endpoint: ${name}: ${cause}`;
}

/** Open the upstream request; it fails with a connect timeout when connecting takes longer than `timeoutMs`. */
function openUpstream(
  upstream: Upstream,
  req: http.IncomingMessage,
  headers: string[],
  timeoutMs: number,
): http.ClientRequest {
  const options: https.RequestOptions = {
    protocol: upstream.protocol,
    host: upstream.host,
    port: upstream.port,
    method: req.method,
    path: req.url,
    headers,
    // The Host header is in `headers` (Node would add a second one).
    setHost: false,
    agent: upstream.agent,
    ...(upstream.lookup ? { lookup: upstream.lookup } : {}),
  };
  const out = upstream.protocol === "https:" ? https.request(options) : http.request(options);
  out.once("socket", (socket) => {
    if (!socket.connecting) return;
    const timer = setTimeout(() => out.destroy(new Error(`connect timeout after ${timeoutMs} ms`)), timeoutMs);
    socket.once(upstream.protocol === "https:" ? "secureConnect" : "connect", () => clearTimeout(timer));
    socket.once("close", () => clearTimeout(timer));
  });
  return out;
}

/** Describe an upstream error without anything the request carried. */
function cause(err: Error): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
}

/** The response head of a non-101 answer to an upgrade, written on the raw connection (then closed). */
function rawHead(status: number, statusMessage: string, headers: RawHeaders): string {
  const lines = [`HTTP/1.1 ${status} ${statusMessage}`];
  for (const [name, value] of headerPairs(headers)) lines.push(`${name}: ${value}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}

/** Answer on a raw (upgrade) connection and close it. */
function rawAnswer(socket: Duplex, status: number, statusMessage: string, text: string): void {
  const body = Buffer.from(`${text}\n`);
  socket.end(
    rawHead(status, statusMessage, [
      "Content-Type",
      "text/plain; charset=utf-8",
      "Content-Length",
      String(body.length),
      "Connection",
      "close",
    ]) + body.toString("utf8"),
  );
}

/** Answer a normal request with a one-line text. */
function textAnswer(res: http.ServerResponse, status: number, text: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store" });
  res.end(`${text}\n`);
}

/**
 * Relay bytes both ways between two connections with half-close: when one side ends its
 * writing, the other side's writing is ended once everything before it is flushed; an error on
 * either destroys both.
 */
export function relayBothWays(a: Duplex, b: Duplex): void {
  a.allowHalfOpen = true;
  b.allowHalfOpen = true;
  const destroyBoth = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on("error", destroyBoth);
  b.on("error", destroyBoth);
  // pipe() ends the destination when the source ends: that is the half-close.
  a.pipe(b);
  b.pipe(a);
  // A side closed without an end of its reading (reset, timeout): nothing more will come.
  a.once("close", () => {
    if (!a.readableEnded) b.destroy();
  });
  b.once("close", () => {
    if (!b.readableEnded) a.destroy();
  });
}

/** Handles the endpoint's requests and upgrades; see the module comment. */
export class GatewayProxy {
  constructor(private readonly deps: GatewayProxyDeps) {}

  private fail(what: string, fields: Record<string, unknown>): void {
    this.deps.logger.warn(fields, what);
  }

  /** A normal request: forwarded with its body streaming, the response streamed back. */
  handleRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    const target = gatewayTarget(req.rawHeaders, this.deps.impersonationPrefix);
    if ("refused" in target) {
      this.fail("gateway request refused", { method: req.method, path: pathOnly(req.url), error: target.refused });
      req.resume();
      textAnswer(res, 400, target.refused);
      return;
    }
    this.deps.resolve(target).then(
      (upstream) => this.forward(req, res, target, upstream),
      (err: unknown) => {
        const text = badGateway(targetName(target), cause(err as Error));
        this.fail("gateway request failed", { method: req.method, path: pathOnly(req.url), error: text });
        req.resume();
        textAnswer(res, 502, text);
      },
    );
  }

  private forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    target: GatewayTarget,
    upstream: Upstream,
  ): void {
    const headers = forwardedHeaders(req.rawHeaders, target, upstream.hostHeader, false, upstream.token);
    const out = openUpstream(upstream, req, headers, this.deps.connectTimeoutMs);
    let failed = false;
    out.on("error", (err) => {
      if (failed) return;
      failed = true;
      const text = badGateway(upstream.name, cause(err));
      this.fail("gateway request failed", { method: req.method, path: pathOnly(req.url), error: text });
      textAnswer(res, 502, text);
    });
    out.on("response", (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, endToEndHeaders(answer.rawHeaders, false));
      // Headers go out at once (a watch's first event may take long).
      res.flushHeaders();
      answer.pipe(res);
      answer.on("error", () => res.destroy());
    });
    // The caller went away: stop the upstream request (a watch would otherwise run on).
    res.on("close", () => {
      if (!res.writableFinished) out.destroy();
    });
    req.pipe(out);
  }

  /** An upgrade request: relayed as described in the module comment. */
  handleUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    const target = gatewayTarget(req.rawHeaders, this.deps.impersonationPrefix);
    if ("refused" in target) {
      this.fail("gateway request refused", { method: req.method, path: pathOnly(req.url), error: target.refused });
      rawAnswer(socket, 400, "Bad Request", target.refused);
      return;
    }
    this.deps.resolve(target).then(
      (upstream) => this.forwardUpgrade(req, socket, head, target, upstream),
      (err: unknown) => {
        const text = badGateway(targetName(target), cause(err as Error));
        this.fail("gateway upgrade failed", { method: req.method, path: pathOnly(req.url), error: text });
        rawAnswer(socket, 502, "Bad Gateway", text);
      },
    );
  }

  private forwardUpgrade(
    req: http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    target: GatewayTarget,
    upstream: Upstream,
  ): void {
    const headers = forwardedHeaders(
      req.rawHeaders,
      target,
      upstream.hostHeader,
      isUpgradeRequest(req.rawHeaders),
      upstream.token,
    );
    const out = openUpstream(upstream, req, headers, this.deps.connectTimeoutMs);
    let answered = false;
    const onClientGone = (): void => {
      if (!answered) out.destroy();
    };
    socket.once("close", onClientGone);
    out.on("error", (err) => {
      if (answered) return;
      answered = true;
      const text = badGateway(upstream.name, cause(err));
      this.fail("gateway upgrade failed", { method: req.method, path: pathOnly(req.url), error: text });
      if (!socket.destroyed) rawAnswer(socket, 502, "Bad Gateway", text);
    });
    out.on("upgrade", (answer, upSocket, upHead) => {
      answered = true;
      socket.off("close", onClientGone);
      socket.write(rawHead(answer.statusCode ?? 101, answer.statusMessage ?? "Switching Protocols", answer.rawHeaders));
      if (upHead.length > 0) socket.write(upHead);
      if (head.length > 0) upSocket.write(head);
      relayBothWays(socket, upSocket);
    });
    out.on("response", (answer) => {
      // Not upgraded: relay the answer as a normal response, delimited by closing the connection.
      answered = true;
      socket.off("close", onClientGone);
      // The body is relayed as it was decoded, delimited by the close: no length.
      const kept = withoutHeader(endToEndHeaders(answer.rawHeaders, false), "content-length");
      socket.write(rawHead(answer.statusCode ?? 502, answer.statusMessage ?? "", [...kept, "Connection", "close"]));
      answer.pipe(socket);
      answer.on("error", () => socket.destroy());
    });
    out.end();
  }
}

/** Raw headers without every `name` (lowercase) entry. */
function withoutHeader(headers: RawHeaders, name: string): string[] {
  const out: string[] = [];
  for (const [n, v] of headerPairs(headers)) if (n.toLowerCase() !== name) out.push(n, v);
  return out;
}

/** The target of a request for messages before its upstream is known. */
function targetName(target: GatewayTarget): string {
  return target.kind === "kube" ? "kube-apiserver" : `service ${target.url.origin}`;
}

/** A request path without its query (queries may hold tokens: never logged). */
function pathOnly(url: string | undefined): string {
  return (url ?? "").split("?")[0] ?? "";
}
