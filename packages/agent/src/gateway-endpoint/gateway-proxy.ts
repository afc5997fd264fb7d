/**
 * Forwarding one gateway endpoint request: the body framed to the upstream, the response streamed back,
 * upgrades relayed both ways; no answer can throw here, and no header value is ever logged.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import * as http from "@cluster-proxy/kit/http";
import type * as http2 from "node:http2";
import { constants as h2constants } from "node:http2";
import * as https from "node:https";
import type { Duplex, Readable, Writable } from "node:stream";
import { CONNECTION_SPECIFIC_HEADERS, type Logger } from "@cluster-proxy/kit";
import {
  endToEndHeaders,
  forwardedHeaders,
  gatewayTarget,
  headerPairs,
  headerValues,
  isUpgradeRequest,
  type GatewayTarget,
  type RawHeaders,
} from "./gateway-request.js";
import type { Upstream } from "./gateway-upstreams.js";
import { errorMessage } from "@cluster-proxy/errors";

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

/**
 * How long an upstream may take to end its stream after the last byte of an answer of a declared
 * length before that stream is reset (docs/design/gateway.md#streams-a-caller-cancels: a reset per
 * answer trips the rapid-reset guard of nghttp2-based servers, which then close the session).
 */
const HELD_ANSWER_GRACE_MS = 2_000;

/** The one-line text of a 502. */
function badGateway(name: string, cause: string): string {
  return `gateway endpoint: ${name}: ${cause}`;
}

/** Methods whose body has no defined meaning: a body needs a declared length. */
const BODYLESS_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "DELETE", "OPTIONS"]);

/** How a request body is delimited (see the module comment), or why it is refused. */
type Framing = { body: "none" } | { body: "length"; length: number } | { body: "stream" } | { refused: string };

/**
 * The framing of a request with `raw` headers; `endAfterHeaders`: for an HTTP/2 request whether its
 * HEADERS ended the stream, undefined for HTTP/1.1 (whose parser already refused conflicting framing).
 */
export function requestFraming(method: string, raw: RawHeaders, endAfterHeaders: boolean | undefined): Framing {
  const chunked = headerValues(raw, "transfer-encoding").length > 0;
  if (chunked && endAfterHeaders !== undefined) return { refused: "Transfer-Encoding in an HTTP/2 request" };
  const lengths = headerValues(raw, "content-length");
  if (lengths.length > 1) return { refused: "Content-Length given more than once" };
  let length: number | undefined;
  if (lengths[0] !== undefined) {
    if (!/^[0-9]{1,15}$/.test(lengths[0].trim()))
      return { refused: `Content-Length ${JSON.stringify(lengths[0])} is not a length` };
    length = Number(lengths[0].trim());
  }
  if (endAfterHeaders === undefined) {
    if (chunked && length !== undefined) return { refused: "both Content-Length and Transfer-Encoding" };
    if (!chunked) return length ? { body: "length", length } : { body: "none" };
  } else if (endAfterHeaders)
    return length ? { refused: "Content-Length on a request without a body" } : { body: "none" };
  if (length !== undefined) return { body: "length", length };
  if (BODYLESS_METHODS.has(method)) return { refused: `a ${method} request with a body needs Content-Length` };
  return { body: "stream" };
}

/** `headers` without any framing header, and the framing's own. */
function framed(headers: RawHeaders, framing: Framing): string[] {
  const out = withoutHeader(withoutHeader(headers, "content-length"), "transfer-encoding");
  if ("refused" in framing || framing.body === "none") return out;
  if (framing.body === "length") out.push("Content-Length", String(framing.length));
  else out.push("Transfer-Encoding", "chunked");
  return out;
}

/** An upstream answer's headers as they go back over HTTP/2 (see the module comment). */
export function h2ResponseHeaders(raw: RawHeaders): http2.OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  const kept = endToEndHeaders(raw, false);
  for (let i = 0; i + 1 < kept.length; i += 2) {
    const name = kept[i] ?? "";
    const value = kept[i + 1] ?? "";
    const lower = name.toLowerCase();
    if (lower.startsWith(":") || CONNECTION_SPECIFIC_HEADERS.has(lower) || !http.isWritableHeader(lower, value))
      continue;
    const had = out[lower];
    if (had === undefined) out[lower] = value;
    else if (Array.isArray(had)) had.push(value);
    else out[lower] = [had, value];
  }
  return out;
}

/**
 * The length of an answer's body as its one `Content-Length` declares it; undefined when it has
 * none, or when that header does not give the body's length (a HEAD, a 204 or 304).
 */
export function bodyLength(method: string | undefined, status: number, raw: RawHeaders): number | undefined {
  if (method === "HEAD" || status === 204 || status === 304) return undefined;
  const values = headerValues(raw, "content-length");
  const text = values.length === 1 ? (values[0] ?? "").trim() : "";
  return /^[0-9]{1,15}$/.test(text) ? Number(text) : undefined;
}

/** Whether `status` is a final answer a caller can be given. */
function relayable(status: number | undefined): status is number {
  return status !== undefined && Number.isInteger(status) && status >= 200 && status <= 599;
}

/** One upstream exchange of a non-upgrade request, over HTTP/1.1 or HTTP/2. */
interface Exchange {
  /** Where the request body goes (its errors are the exchange's). */
  out: Writable;
  /** Whether the request ended with its head (nothing is to be written). */
  ended: boolean;
  /** Stop the exchange (HTTP/2: RST_STREAM with CANCEL; HTTP/1.1: close the connection). */
  cancel(): void;
  /** Called with the final answer: its status, raw headers and body. */
  onResponse(listener: (status: number | undefined, rawHeaders: string[], body: Readable) => void): void;
}

/**
 * Where an answer goes back: the endpoint's HTTP/2 stream itself, or an HTTP/1.1 response (tests
 * of the forwarding). Not through the HTTP/2 compatibility layer's `writeHead`, which always
 * waits for trailers: its END_STREAM then goes in an empty DATA frame of its own, a TLS record
 * and tunnel packet more per answer, where `end(last)` sets it on the last DATA frame.
 */
interface AnswerOut {
  head(status: number, headers: http2.OutgoingHttpHeaders): void;
  /** Write a body chunk; false when the caller's buffer is full. */
  write(chunk: Buffer): boolean;
  /** End the answer, with its last chunk when given. */
  end(last?: Buffer): void;
  onDrain(fn: () => void): void;
}

function answerOut(res: AnyResponse): AnswerOut {
  if ("stream" in res) {
    const stream = res.stream;
    return {
      head: (status, headers) => {
        stream.respond({ ...headers, [h2constants.HTTP2_HEADER_STATUS]: status });
      },
      write: (chunk) => stream.write(chunk),
      end: (last) => {
        stream.end(last);
      },
      onDrain: (fn) => {
        stream.on("drain", fn);
      },
    };
  }
  return {
    head: (status, headers) => {
      res.writeHead(status, headers);
      res.flushHeaders();
    },
    write: (chunk) => res.write(chunk),
    end: (last) => {
      res.end(last);
    },
    onDrain: (fn) => {
      res.on("drain", fn);
    },
  };
}

/** An exchange over an HTTP/1.1 request. */
function http1Exchange(out: http.ClientRequest): Exchange {
  return {
    out,
    ended: false,
    cancel: () => out.destroy(),
    onResponse: (listener) => out.on("response", (answer) => listener(answer.statusCode, answer.rawHeaders, answer)),
  };
}

/** An exchange over an HTTP/2 stream; `ended`: it was opened with END_STREAM. */
function http2Exchange(stream: http2.ClientHttp2Stream, ended: boolean): Exchange {
  return {
    out: stream,
    ended,
    cancel: () => {
      if (!stream.closed) stream.close(h2constants.NGHTTP2_CANCEL);
    },
    onResponse: (listener) =>
      stream.on("response", (headers) => {
        const raw: string[] = [];
        for (const [name, value] of Object.entries(headers)) {
          if (name.startsWith(":") || value === undefined) continue;
          for (const v of Array.isArray(value) ? value : [value]) raw.push(name, String(v));
        }
        listener(Number(headers[h2constants.HTTP2_HEADER_STATUS]), raw, stream);
      }),
  };
}

/**
 * The HTTP/2 head of a request whose HTTP/1.1 `headers` (with `Host` and its framing header) were
 * built for the upstream: `Host` becomes `:authority`; connection-specific headers, chunked coding
 * included, are dropped (DATA frames delimit the body); a `content-length` stays.
 */
function h2RequestHeaders(line: { method: string; url: string }, headers: RawHeaders): http2.OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {
    [h2constants.HTTP2_HEADER_METHOD]: line.method,
    [h2constants.HTTP2_HEADER_PATH]: line.url,
    [h2constants.HTTP2_HEADER_SCHEME]: "https",
  };
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i] ?? "";
    const value = headers[i + 1] ?? "";
    const lower = name.toLowerCase();
    if (lower === "host") {
      out[h2constants.HTTP2_HEADER_AUTHORITY] = value;
      continue;
    }
    if (lower.startsWith(":") || CONNECTION_SPECIFIC_HEADERS.has(lower)) continue;
    const had = out[lower];
    if (had === undefined) out[lower] = value;
    else if (Array.isArray(had)) had.push(value);
    else out[lower] = [had, value];
  }
  return out;
}

/** Raw headers without HTTP/2 pseudo-headers (`:method`, `:path`, ...). */
function withoutPseudo(raw: RawHeaders): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const n = raw[i] ?? "";
    if (!n.startsWith(":")) out.push(n, raw[i + 1] ?? "");
  }
  return out;
}

/** Open the upstream request; it fails with a connect timeout when connecting takes longer than `timeoutMs`. */
function openUpstream(
  upstream: Upstream,
  req: { method: string; url: string },
  headers: string[] | http.OutgoingHttpHeaders,
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

/**
 * Describe a request Node refused to build: by its error code only (its message may quote a
 * header value, and the headers hold the agent's token).
 */
function refusedByNode(err: unknown): string {
  if (!(err instanceof Error)) return "the request cannot be sent";
  return `the request cannot be sent (${"code" in err && typeof err.code === "string" ? err.code : err.name})`;
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

/** Answer a normal request with a one-line text (or reset its stream when its head is gone already). */
function textAnswer(res: AnyResponse, status: number, text: string): void {
  try {
    if (res.headersSent || res.destroyed) {
      cut(res);
      return;
    }
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
    res.end(`${text}\n`);
  } catch {
    cut(res);
  }
}

/** A request as the endpoint gets it: an HTTP/2 stream (HTTP/1.1 in tests of the forwarding only). */
type AnyRequest = http2.Http2ServerRequest | http.IncomingMessage;
/** Its response. */
type AnyResponse = http2.Http2ServerResponse | http.ServerResponse;

/** Abort a response (reset its stream, or close its connection). */
function cut(res: AnyResponse): void {
  if ("stream" in res) res.stream.close(h2constants.NGHTTP2_INTERNAL_ERROR);
  else res.destroy();
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

  /**
   * Run `fn`, which starts the upstream exchange inside a promise callback: Node throws at once on
   * a request it cannot build (a header it refuses, a bad option), and a throw there would be an
   * unhandled rejection that ends the agent. It fails this request with 502 instead (`cleanup`
   * releases what `fn` may hold); a response already begun is cut.
   */
  private guarded(req: AnyRequest, res: AnyResponse, name: string, fn: () => void, cleanup?: () => void): void {
    try {
      fn();
    } catch (err) {
      try {
        cleanup?.();
      } catch {
        // Already gone.
      }
      const text = badGateway(name, refusedByNode(err));
      this.fail("gateway request failed", { method: req.method, path: pathOnly(req.url), error: text });
      req.resume();
      textAnswer(res, 502, text);
    }
  }

  /** A normal request (an HTTP/2 stream): forwarded with its body framed, the response streamed back. */
  handleRequest(req: AnyRequest, res: AnyResponse): void {
    const raw = withoutPseudo(req.rawHeaders);
    const method = req.method ?? "GET";
    const framing = requestFraming(method, raw, "stream" in req ? req.stream.endAfterHeaders : undefined);
    const target = "refused" in framing ? framing : gatewayTarget(raw, this.deps.impersonationPrefix);
    if ("refused" in target) {
      this.fail("gateway request refused", { method, path: pathOnly(req.url), error: target.refused });
      req.resume();
      textAnswer(res, 400, target.refused);
      return;
    }
    if ("refused" in framing) return;
    this.deps.resolve(target).then(
      (upstream) => this.guarded(req, res, upstream.name, () => this.forward(req, res, raw, framing, target, upstream)),
      (err: unknown) => {
        const text = badGateway(targetName(target), cause(err as Error));
        this.fail("gateway request failed", { method, path: pathOnly(req.url), error: text });
        req.resume();
        textAnswer(res, 502, text);
      },
    );
  }

  private forward(
    req: AnyRequest,
    res: AnyResponse,
    raw: string[],
    framing: Exclude<Framing, { refused: string }>,
    target: GatewayTarget,
    upstream: Upstream,
  ): void {
    const headers = framed(forwardedHeaders(raw, target, upstream.hostHeader, false, upstream.token), framing);
    const line = { method: req.method ?? "GET", url: req.url ?? "/" };
    const overHttp1 = (): Exchange => http1Exchange(openUpstream(upstream, line, headers, this.deps.connectTimeoutMs));
    if (!upstream.h2) {
      this.relay(req, res, framing, upstream.name, overHttp1());
      return;
    }
    // The caller may leave while the session is being set up.
    let gone = false;
    const onGone = (): void => {
      gone = true;
    };
    res.once("close", onGone);
    const endStream = framing.body === "none";
    upstream.h2.open(h2RequestHeaders(line, headers), endStream, this.deps.connectTimeoutMs).then(
      (stream) => {
        res.off("close", onGone);
        if (gone) {
          stream?.close(h2constants.NGHTTP2_CANCEL);
          req.resume();
          return;
        }
        this.guarded(
          req,
          res,
          upstream.name,
          () => this.relay(req, res, framing, upstream.name, stream ? http2Exchange(stream, endStream) : overHttp1()),
          () => {
            if (stream && !stream.closed) stream.close(h2constants.NGHTTP2_CANCEL);
          },
        );
      },
      (err: unknown) => {
        res.off("close", onGone);
        const text = badGateway(upstream.name, cause(err as Error));
        this.fail("gateway request failed", { method: req.method, path: pathOnly(req.url), error: text });
        req.resume();
        textAnswer(res, 502, text);
      },
    );
  }

  /** Send the body of `req` through `exchange` and stream its answer back to `res`. */
  private relay(
    req: AnyRequest,
    res: AnyResponse,
    framing: Exclude<Framing, { refused: string }>,
    name: string,
    exchange: Exchange,
  ): void {
    const out = exchange.out;
    let failed = false;
    let answered = false;
    /** The upstream's answer has ended (an answer of a declared length is done before that). */
    let upstreamEnded = false;
    const failWith = (status: number, text: string): void => {
      if (failed) return;
      failed = true;
      exchange.cancel();
      this.fail("gateway request failed", { method: req.method, path: pathOnly(req.url), error: text });
      textAnswer(res, status, text);
    };
    out.on("error", (err) => failWith(502, badGateway(name, cause(err))));
    exchange.onResponse((status, rawHeaders, answer) => {
      if (failed) {
        answer.resume();
        return;
      }
      if (!relayable(status)) {
        answer.resume();
        failWith(502, badGateway(name, `answered with status ${status ?? "none"}, which cannot be relayed`));
        return;
      }
      const to = answerOut(res);
      try {
        // The head goes out at once (a watch's first event may take long).
        to.head(status, h2ResponseHeaders(rawHeaders));
      } catch (err) {
        answer.resume();
        failWith(502, badGateway(name, `its answer cannot be relayed: ${errorMessage(err)}`));
        return;
      }
      // A body of a declared length ends with its last byte (END_STREAM on that DATA frame), not
      // with the upstream's end a turn later.
      const declared = bodyLength(req.method, status, rawHeaders);
      let received = 0;
      const finish = (last?: Buffer): void => {
        if (answered) return;
        answered = true;
        try {
          to.end(last);
        } catch {
          cut(res);
        }
      };
      answer.on("data", (c: Buffer) => {
        if (answered) return;
        received += c.length;
        if (declared !== undefined && received >= declared) {
          // Never past the declared length (the upstream's parser refuses more; this holds anyway).
          finish(c.subarray(0, c.length - (received - declared)));
          return;
        }
        try {
          if (!to.write(c)) answer.pause();
        } catch {
          exchange.cancel();
          cut(res);
        }
      });
      to.onDrain(() => answer.resume());
      answer.on("end", () => {
        upstreamEnded = true;
        finish();
      });
      answer.on("error", () => cut(res));
    });
    // The caller's stream closed before the upstream's answer ended (the caller went away, or
    // its answer of a declared length is complete while the upstream holds its stream): stop the
    // upstream request (a watch, or a held stream, would otherwise run on). Not
    // `writableFinished`: an HTTP/2 response reports it on a reset too.
    res.on("close", () => {
      if (upstreamEnded) return;
      if (!answered) {
        exchange.cancel();
        return;
      }
      // Answered before the upstream's end, so whole by its declared length: give the upstream its
      // turn to end the stream, and reset it only if it holds it.
      const grace = setTimeout(() => {
        if (!upstreamEnded) exchange.cancel();
      }, HELD_ANSWER_GRACE_MS);
      grace.unref();
      out.once("close", () => clearTimeout(grace));
    });
    if (framing.body === "none") {
      // An HTTP/2 request whose HEADERS ended its stream has nothing to read, and is left unread:
      // node then destroys the stream once the answer's last write is done. Read to its end, node
      // destroys it at its close with that write still pending and builds an
      // ERR_STREAM_DESTROYED, stack trace and all, for every answer.
      if (!("stream" in req && req.stream.endAfterHeaders)) req.resume();
      if (!exchange.ended) out.end();
      return;
    }
    let received = 0;
    const declared = framing.body === "length" ? framing.length : undefined;
    const mismatch = (): void =>
      failWith(400, `gateway endpoint: the body's length disagrees with Content-Length ${declared}`);
    req.on("data", (c: Buffer) => {
      if (failed) return;
      received += c.length;
      if (declared !== undefined && received > declared) {
        mismatch();
        return;
      }
      if (!out.write(c)) {
        req.pause();
        out.once("drain", () => req.resume());
      }
    });
    req.on("end", () => {
      if (failed) return;
      if (declared !== undefined && received !== declared) mismatch();
      else out.end();
    });
    req.on("aborted", () => exchange.cancel());
    req.on("error", () => exchange.cancel());
  }

  /** An upgrade request: relayed as described in the module comment. */
  handleUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    const length = req.headers["content-length"];
    const target =
      req.headers["transfer-encoding"] !== undefined || (length !== undefined && length.trim() !== "0")
        ? { refused: "an upgrade request carries no body (Content-Length or Transfer-Encoding given)" }
        : gatewayTarget(req.rawHeaders, this.deps.impersonationPrefix);
    if ("refused" in target) {
      this.fail("gateway request refused", { method: req.method, path: pathOnly(req.url), error: target.refused });
      rawAnswer(socket, 400, "Bad Request", target.refused);
      return;
    }
    this.deps.resolve(target).then(
      (upstream) => {
        // As for a normal request (see `guarded`): a request Node refuses to build fails this upgrade alone.
        try {
          this.forwardUpgrade(req, socket, head, target, upstream);
        } catch (err) {
          const text = badGateway(upstream.name, refusedByNode(err));
          this.fail("gateway upgrade failed", { method: req.method, path: pathOnly(req.url), error: text });
          if (socket.destroyed) return;
          try {
            rawAnswer(socket, 502, "Bad Gateway", text);
          } catch {
            socket.destroy();
          }
        }
      },
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
    // No body: no Content-Length (a body-less upgrade with one confuses some servers).
    const headers = withoutHeader(
      forwardedHeaders(req.rawHeaders, target, upstream.hostHeader, isUpgradeRequest(req.rawHeaders), upstream.token),
      "content-length",
    );
    const out = openUpstream(
      upstream,
      { method: req.method ?? "GET", url: req.url ?? "/" },
      headerObject(headers),
      this.deps.connectTimeoutMs,
    );
    // Nor chunked coding: the request ends with its head (Node would chunk a POST by default).
    out.useChunkedEncodingByDefault = false;
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
      if (!relayable(answer.statusCode)) {
        answer.resume();
        out.destroy();
        rawAnswer(
          socket,
          502,
          "Bad Gateway",
          badGateway(upstream.name, `answered with status ${answer.statusCode ?? "none"}`),
        );
        return;
      }
      // The body is relayed as it was decoded, delimited by the close: no length.
      const kept = withoutHeader(endToEndHeaders(answer.rawHeaders, false), "content-length");
      socket.write(rawHead(answer.statusCode ?? 502, answer.statusMessage ?? "", [...kept, "Connection", "close"]));
      answer.pipe(socket);
      answer.on("error", () => socket.destroy());
    });
    out.end();
  }
}

/**
 * Raw header pairs as an object (a repeated name's values in an array): Node writes a request
 * head given as an array at once, before its framing can be chosen.
 */
function headerObject(headers: RawHeaders): http.OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  const names = new Map<string, string>();
  for (const [name, value] of headerPairs(headers)) {
    const key = names.get(name.toLowerCase()) ?? name;
    names.set(name.toLowerCase(), key);
    const had = out[key];
    out[key] = had === undefined ? value : Array.isArray(had) ? [...had, value] : [had, value];
  }
  return out;
}

/** Raw headers without every `name` (lowercase) entry. */
function withoutHeader(headers: RawHeaders, name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const n = headers[i] ?? "";
    if (n.toLowerCase() !== name) out.push(n, headers[i + 1] ?? "");
  }
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
