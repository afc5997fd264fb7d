/**
 * Relaying an admitted request to its cluster's gateway endpoint: one HTTP/2 stream (an upgrade: an
 * HTTP/1.1 byte relay), answers checked before they reach the caller, failures as one-line answers.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import * as http from "@cluster-proxy/kit/http";
import * as http2 from "node:http2";
import type { Duplex, Readable } from "node:stream";
import type * as tls from "node:tls";
import { GATEWAY_ENDPOINT_HOST } from "@cluster-proxy/api";
import { ConnectError, DialError } from "@cluster-proxy/client";
import { CONNECTION_SPECIFIC_HEADERS } from "@cluster-proxy/kit";
import type { BodyFraming } from "./body-framing.js";
import { provablyUnprocessed, type ClusterSessions } from "./cluster-pool.js";
import { GatewayError } from "./gateway-error.js";

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
  sessions: ClusterSessions;
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
}

/** The HTTP/2 request headers of a plain request: ours, the caller's end-to-end ones, the framing's length. */
export function endpointHeaders(r: RelayRequest, framing: BodyFraming): http2.OutgoingHttpHeaders {
  const out: http2.OutgoingHttpHeaders = {
    ":method": r.method,
    ":path": r.path,
    ":scheme": "https",
    ":authority": GATEWAY_ENDPOINT_HOST,
  };
  for (const [name, value] of Object.entries(r.headers)) {
    const lower = name.toLowerCase();
    if (lower.startsWith(":") || CONNECTION_SPECIFIC_HEADERS.has(lower) || lower === "content-length") continue;
    out[lower] = value;
  }
  if (framing.body === "length") out["content-length"] = String(framing.length);
  return out;
}

/** The HTTP/1.1 headers of an upgrade request: no body, so no `Content-Length` or `Transfer-Encoding`. */
export function upgradeHeaders(r: RelayRequest): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(r.headers)) {
    const lower = name.toLowerCase();
    if (lower === "content-length" || lower === "transfer-encoding" || lower === "host") continue;
    out[name] = value;
  }
  out.host = GATEWAY_ENDPOINT_HOST;
  return out;
}

/**
 * The response headers that go to the caller: no pseudo-headers, nothing of
 * {@link CONNECTION_SPECIFIC_HEADERS}, no name or value Node would refuse to write.
 */
export function responseHeaders(
  headers: http.IncomingHttpHeaders | http2.IncomingHttpHeaders,
): http.OutgoingHttpHeaders {
  const out: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (value === undefined || lower.startsWith(":") || CONNECTION_SPECIFIC_HEADERS.has(lower)) continue;
    const values = (Array.isArray(value) ? value : [String(value)]).filter((v) => http.isWritableHeader(lower, v));
    if (values.length === 0) continue;
    out[lower] = Array.isArray(value) ? values : values[0];
  }
  return out;
}

/** A `content-length` value as a number, or undefined when absent or not a plain decimal. */
export function declaredLength(value: string | string[] | number | undefined): number | undefined {
  const text = Array.isArray(value) ? (value.length === 1 ? value[0] : undefined) : value;
  if (text === undefined) return undefined;
  const s = String(text).trim();
  return /^[0-9]{1,15}$/.test(s) ? Number(s) : undefined;
}

/** Whether `status` can be a final answer to a caller (101 only ends an upgrade). */
export function relayableStatus(status: number): boolean {
  return Number.isInteger(status) && status >= 200 && status <= 599;
}

function badStatus(cluster: string, status: unknown): GatewayError {
  return new GatewayError(
    502,
    "endpoint-error",
    `cluster "${cluster}": the target answered with status ${JSON.stringify(status)}, which cannot be relayed`,
  );
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

/** `fn()`, or false when it threw (a write to a caller that went away, a head Node refused). */
function guarded(fn: () => unknown): boolean {
  try {
    fn();
    return true;
  } catch {
    return false;
  }
}

/**
 * Methods retried once after their request reached the endpoint (RFC 9110 9.2.1 "safe": repeating
 * them changes nothing). PUT and DELETE are idempotent by RFC 9110 but are not retried once sent: a
 * DELETE of an object recreated in between, or a PUT racing another writer, would act twice
 * (docs/design/gateway.md, "Retry").
 */
export const RETRIED_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Why a failed first attempt is retried: `unsent` (the stream never went out: dial, TLS or session
 * failure), `refused` (the endpoint refused it or its GOAWAY excluded it: RFC 9113 8.7),
 * `incomplete` (the endpoint has the head of a request with a body but no body byte and no end:
 * nothing complete to process), `safe` (a method of {@link RETRIED_METHODS}).
 */
export type RetryReason = "unsent" | "refused" | "incomplete" | "safe";

/** The answer `err` maps to, with `why` appended to its message. */
function explained(cluster: string, err: Error, why: string): GatewayError {
  const g = relayError(cluster, err);
  return new GatewayError(g.status, g.reason, `${g.message} (${why})`, { cause: err }, g.retryAfterSeconds);
}

/** Whether a dial failure is worth a second dial (a dial that timed out is not: the caller waited enough). */
function retryableDialFailure(err: unknown): boolean {
  return !(err instanceof DialError && err.reason === "timeout") && !(err instanceof GatewayError);
}

/**
 * Relay one request whose body is framed as `framing`; resolves with the status sent (rejects with
 * a GatewayError when nothing was sent yet). `count` gets the bytes each way.
 *
 * A first attempt whose stream fails before the response head arrived is retried once, on another
 * session (`onRetry` is told why), when the endpoint provably did not process it or processing it
 * twice is harmless, and the caller's body can still be sent whole (what was read of it is kept,
 * up to {@link RETRY_BODY_BUFFER}): see {@link RetryReason}. Never after any response byte reached
 * the caller.
 */
export function relayRequest(
  r: RelayRequest,
  framing: BodyFraming,
  caller: CallerExchange,
  count: { in(n: number): void; out(n: number): void },
  onRetry?: (reason: RetryReason, err: Error) => void,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const abort = new AbortController();
    let up: http2.ClientHttp2Stream | undefined;
    let settled = false;
    let retried = false;
    const body = new BodyPump(caller.body, framing, count);
    const fail = (err: unknown): void => {
      if (settled) return;
      settled = true;
      abort.abort();
      body.stop();
      if (up && !up.closed) up.close(http2.constants.NGHTTP2_CANCEL);
      if (caller.headersSent()) {
        guarded(() => caller.destroy());
        resolve(502);
      } else reject(relayError(r.cluster, err));
    };
    caller.onClose(() => {
      if (!caller.writableEnded()) fail(new Error("the caller went away"));
    });
    if (framing.body === "none") caller.body.resume();

    const attempt = (avoid?: http2.Http2Session): void => {
      let done = false;
      let responded = false;
      let stream: http2.ClientHttp2Stream | undefined;
      let session: http2.Http2Session | undefined;
      /** This attempt failed: retry once when safe (see the function comment), else fail. */
      const attemptFailed = (err: unknown): void => {
        if (settled || done) return;
        done = true;
        const e = err instanceof Error ? err : new Error(String(err));
        const reason =
          retried || responded || caller.headersSent() || abort.signal.aborted || !body.replayable()
            ? undefined
            : !stream
              ? retryableDialFailure(e)
                ? "unsent"
                : undefined
              : provablyUnprocessed(stream, session)
                ? "refused"
                : framing.body !== "none" &&
                    !body.ended() &&
                    body.sent === 0 &&
                    !(framing.body === "length" && framing.length === 0)
                  ? "incomplete"
                  : RETRIED_METHODS.has(r.method)
                    ? "safe"
                    : undefined;
        if (!reason) {
          fail(
            retried
              ? explained(r.cluster, e, "after one retry on another connection")
              : !responded && !caller.headersSent() && !abort.signal.aborted && !body.replayable()
                ? explained(
                    r.cluster,
                    e,
                    `not retried: more of its body had been sent than the ${RETRY_BODY_BUFFER / 1024} KiB kept for a retry`,
                  )
                : stream && !responded && !caller.headersSent() && !abort.signal.aborted
                  ? explained(
                      r.cluster,
                      e,
                      `not retried: the ${r.method} request had reached the agent and may have been processed`,
                    )
                  : e,
          );
          return;
        }
        retried = true;
        body.detach();
        if (stream && !stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
        up = undefined;
        onRetry?.(reason, e);
        attempt(session);
      };
      r.sessions.request(endpointHeaders(r, framing), framing.body === "none", abort.signal, avoid).then((s) => {
        if (settled) {
          s.close(http2.constants.NGHTTP2_CANCEL);
          return;
        }
        stream = s;
        session = s.session;
        up = s;
        s.on("error", attemptFailed);
        s.on("close", () => {
          if (!settled) attemptFailed(new Error(`the endpoint closed the stream (HTTP/2 code ${s.rstCode})`));
        });
        s.on("response", (head) => {
          if (settled || done) return;
          responded = true;
          body.stop();
          const status = Number(head[":status"]);
          if (!relayableStatus(status)) {
            fail(badStatus(r.cluster, head[":status"]));
            return;
          }
          if (!guarded(() => caller.writeHead(status, responseHeaders(head)))) {
            fail(new Error("the response head could not be written"));
            return;
          }
          const finish = (): void => {
            if (settled) return;
            settled = true;
            guarded(() => caller.end());
            resolve(status);
          };
          // A body of a declared length is complete with its last byte: the caller's answer ends
          // then, not a hop later with the endpoint's END_STREAM (the rest of the stream is read
          // and dropped; HTTP/2 refuses DATA beyond a declared length).
          const declared = r.method === "HEAD" ? undefined : declaredLength(head["content-length"]);
          let received = 0;
          s.on("data", (c: Buffer) => {
            if (settled) return;
            count.out(c.length);
            received += c.length;
            let more = true;
            if (!guarded(() => (more = caller.write(c)))) {
              fail(new Error("the caller could not be written to"));
              return;
            }
            if (declared !== undefined && received >= declared) finish();
            else if (!more) {
              s.pause();
              caller.onDrain(() => s.resume());
            }
          });
          s.on("end", finish);
        });
        if (framing.body !== "none") body.pipeTo(s, fail);
      }, attemptFailed);
    };
    attempt();
  });
}

/**
 * Body bytes kept for a retry: a body that went upstream up to this size can be sent again whole
 * on another connection (until the response head arrives); a longer one cannot, and its request is
 * then only retried while none of it was read.
 */
export const RETRY_BODY_BUFFER = 64 * 1024;

/**
 * The caller's body into the current attempt's stream, ended there; a body longer or shorter than
 * its declared length resets the stream (the endpoint never sees a complete request) and fails with
 * 400. Counts what was read from the caller (`sent`) and keeps it up to {@link RETRY_BODY_BUFFER};
 * a retry {@link detach}es it from the failed stream (the body paused, nothing of it lost) and
 * pipes it into the next, the kept bytes first.
 */
class BodyPump {
  /** Body bytes read from the caller (over all attempts: each byte is read once). */
  sent = 0;
  private finished = false;
  /** What was read so far, while it fits {@link RETRY_BODY_BUFFER}; undefined once it did not. */
  private kept: Buffer[] | undefined = [];
  private detachCurrent: (() => void) | undefined;

  constructor(
    private readonly body: Readable,
    private readonly framing: BodyFraming,
    private readonly count: { in(n: number): void },
  ) {}

  /** The caller's body ended (its end was read). */
  ended(): boolean {
    return this.finished;
  }

  /** Everything read of the body so far is kept: a retry can send it whole. */
  replayable(): boolean {
    return this.kept !== undefined;
  }

  /** Pipe the body into `stream`, the kept bytes first; `fail` (final, never retried) for a length mismatch or the caller's body erroring. */
  pipeTo(stream: http2.ClientHttp2Stream, fail: (err: unknown) => void): void {
    const { body, framing } = this;
    const declared = framing.body === "length" ? framing.length : undefined;
    const mismatch = (): void =>
      fail(
        new GatewayError(400, "bad-request", `refused: the body's length disagrees with content-length ${declared}`),
      );
    let more = true;
    for (const c of this.kept ?? []) more = stream.write(c);
    if (this.finished) {
      stream.end();
      return;
    }
    const onData = (c: Buffer): void => {
      this.sent += c.length;
      this.count.in(c.length);
      if (this.kept && this.sent <= RETRY_BODY_BUFFER) this.kept.push(c);
      else this.kept = undefined;
      if (declared !== undefined && this.sent > declared) {
        body.pause();
        mismatch();
        return;
      }
      if (!stream.write(c)) {
        body.pause();
        stream.once("drain", () => body.resume());
      }
    };
    const onEnd = (): void => {
      this.finished = true;
      if (declared !== undefined && this.sent !== declared) mismatch();
      else stream.end();
    };
    body.on("data", onData);
    body.once("end", onEnd);
    body.once("error", fail);
    this.detachCurrent = () => {
      body.pause();
      body.off("data", onData);
      body.off("end", onEnd);
      body.off("error", fail);
    };
    if (more) body.resume();
    else stream.once("drain", () => body.resume());
  }

  /** Stop feeding the current stream (a retry follows). */
  detach(): void {
    this.detachCurrent?.();
    this.detachCurrent = undefined;
  }

  /** No retry can come any more (the response head arrived, or the exchange is over): let go of the kept bytes. */
  stop(): void {
    this.kept = undefined;
  }
}

/** Write a one-line error response on a raw socket (an upgrade request that was refused). */
export function writeRawError(socket: Duplex, err: GatewayError): void {
  const body = `${err.message}\n`;
  guarded(() =>
    socket.end(
      `HTTP/1.1 ${err.status} ${http.STATUS_CODES[err.status] ?? ""}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    ),
  );
}

/** An HTTP/1.1 response head; header pairs Node's writer would refuse are left out. */
function rawHead(status: number, message: string, headers: string[]): string {
  const text = /^[\t\x20-\x7e]*$/.test(message) ? message : "";
  const lines = [`HTTP/1.1 ${status} ${text}`];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i]!;
    const value = headers[i + 1]!;
    if (http.isWritableHeader(name, value)) lines.push(`${name}: ${value}`);
  }
  return `${lines.join("\r\n")}\r\n\r\n`;
}

/** Raw header pairs without {@link CONNECTION_SPECIFIC_HEADERS} and `content-length`. */
function endToEndRaw(raw: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const lower = raw[i]!.toLowerCase();
    if (!CONNECTION_SPECIFIC_HEADERS.has(lower) && lower !== "content-length") out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/**
 * Relay an upgrade over a connection of its own: send the request (no body), and when the endpoint
 * answers 101 splice the caller's socket and the endpoint's both ways (each direction ends on its
 * own: half-close). A non-101 answer is relayed as it is, delimited by closing the caller's
 * connection. Resolves with the status when the exchange is over (for 101: when both directions
 * ended); the endpoint connection is never used again.
 */
export function relayUpgrade(
  r: RelayRequest,
  client: Duplex,
  head: Buffer,
  count: { in(n: number): void; out(n: number): void },
  track: (socket: Duplex) => void,
  onRetry?: (reason: RetryReason, err: Error) => void,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const abort = new AbortController();
    let answered = false;
    const failBeforeAnswer = (err: unknown): void => {
      if (answered) return;
      answered = true;
      abort.abort();
      reject(relayError(r.cluster, err));
    };
    client.on("error", () => abort.abort());
    // A caller gone before the endpoint answered: abandon the request.
    client.once("close", () => failBeforeAnswer(new Error("the caller closed the connection")));
    // Only a connection that failed before the request was written is tried again (once): an
    // upgrade's request may act (exec, attach) as soon as it arrives.
    let retried = false;
    const connectionFailed = (err: unknown): void => {
      const e = err instanceof Error ? err : new Error(String(err));
      if (retried || answered || abort.signal.aborted || !retryableDialFailure(e)) {
        failBeforeAnswer(retried ? explained(r.cluster, e, "after one retry on another connection") : e);
        return;
      }
      retried = true;
      onRetry?.("unsent", e);
      r.sessions.upgradeConnection(abort.signal).then(connected, connectionFailed);
    };
    const connected = (connection: tls.TLSSocket): void => {
      if (answered) {
        connection.destroy();
        return;
      }
      track(connection);
      let up: http.ClientRequest;
      try {
        up = http.request({
          method: r.method,
          path: r.path,
          headers: upgradeHeaders(r),
          setHost: false,
          createConnection: () => connection,
        });
      } catch (err) {
        // Node throws at once on a header it cannot write: this request fails, the process goes on.
        connection.destroy();
        failBeforeAnswer(err);
        return;
      }
      // No body: neither a length nor chunked coding (Node would chunk a POST by default).
      up.useChunkedEncodingByDefault = false;
      abort.signal.addEventListener("abort", () => up.destroy(), { once: true });
      up.on("error", (err) => {
        connection.destroy();
        failBeforeAnswer(err);
      });
      up.on("response", (res) => {
        const status = res.statusCode ?? 0;
        if (!relayableStatus(status)) {
          connection.destroy();
          failBeforeAnswer(badStatus(r.cluster, status));
          return;
        }
        answered = true;
        guarded(() =>
          client.write(
            rawHead(status, res.statusMessage ?? "", [...endToEndRaw(res.rawHeaders), "Connection", "close"]),
          ),
        );
        res.on("data", (c: Buffer) => count.out(c.length));
        res.pipe(client);
        res.on("end", () => {
          connection.destroy();
          resolve(status);
        });
        res.on("error", () => {
          connection.destroy();
          client.destroy();
          resolve(502);
        });
      });
      up.on("upgrade", (res, endpoint: Duplex, endpointHead: Buffer) => {
        if (answered) {
          endpoint.destroy();
          return;
        }
        answered = true;
        if (client.destroyed) {
          endpoint.destroy();
          resolve(101);
          return;
        }
        endpoint.allowHalfOpen = true;
        if (endpoint !== connection) track(endpoint);
        guarded(() => client.write(rawHead(101, res.statusMessage ?? "Switching Protocols", res.rawHeaders)));
        if (endpointHead.length) {
          count.out(endpointHead.length);
          guarded(() => client.write(endpointHead));
        }
        if (head.length) {
          count.in(head.length);
          guarded(() => endpoint.write(head));
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
          connection.destroy();
          resolve(101);
        };
        client.once("close", closeBoth);
        endpoint.once("close", closeBoth);
        endpoint.on("error", closeBoth);
      });
      up.end();
    };
    r.sessions.upgradeConnection(abort.signal).then(connected, connectionFailed);
  });
}
