// Run inside the lab network namespace by test/gateway/gateway.test.ts (ip netns exec ... node --import tsx):
//
//   attack-probe.ts <request.json>
//
// One request to the gateway as a hostile caller from the workstation's network would send it,
// below any client library that could tidy it up: over HTTP/1.1 on a raw TLS socket (the request
// written byte for byte), or over HTTP/2 (node:http2, one stream). The file holds an
// {@link AttackRequest}. With `body`, the HTTP/1.1 request carries it as one chunk of
// `Transfer-Encoding: chunked` and the HTTP/2 request as DATA frames without `content-length`,
// whatever the method: what a request-smuggling attempt sends. The serving certificate is not
// checked (an attacker need not trust it). Prints one JSON line, an {@link AttackAnswer}.
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import tls from "node:tls";
import { errorMessage } from "@cluster-proxy/errors";

/** What to send. */
export interface AttackRequest {
  proto: "h1" | "h2";
  /** `https://<host>:<port>` of the gateway. */
  url: string;
  /** A file with the caller's bearer token. */
  tokenFile: string;
  method: string;
  /** The request target, e.g. `/mc1/version`. */
  path: string;
  /** More request headers (names in lower case). */
  headers?: Record<string, string>;
  /** A request body, framed as described above. */
  body?: string;
}

/** What came back (status and headers of the first response; the error, if the exchange failed). */
export interface AttackAnswer {
  status?: number;
  headers?: Record<string, string>;
  body?: string;
  /** HTTP/1.1: everything the connection carried until it closed (at most 64 KiB). */
  raw?: string;
  error?: string;
}

const TIMEOUT_MS = 30_000;
const MAX_RAW = 64 * 1024;

function http1(r: AttackRequest, token: string): Promise<AttackAnswer> {
  const url = new URL(r.url);
  const head = [
    `${r.method} ${r.path} HTTP/1.1`,
    `Host: ${url.host}`,
    `Authorization: Bearer ${token}`,
    ...Object.entries(r.headers ?? {}).map(([k, v]) => `${k}: ${v}`),
    ...(r.body === undefined ? [] : ["Transfer-Encoding: chunked"]),
    "Connection: close",
  ];
  const body = r.body === undefined ? "" : `${Buffer.byteLength(r.body).toString(16)}\r\n${r.body}\r\n0\r\n\r\n`;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const socket = tls.connect({
      host: url.hostname,
      port: Number(url.port || 443),
      rejectUnauthorized: false,
      ALPNProtocols: ["http/1.1"],
    });
    const timer = setTimeout(() => socket.destroy(new Error(`no end within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    const done = (error?: Error): void => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks).toString("latin1");
      resolve({ ...parseHttp1(raw), raw, ...(error && !raw ? { error: error.message } : {}) });
    };
    socket.once("secureConnect", () => socket.write(`${head.join("\r\n")}\r\n\r\n${body}`, "latin1"));
    socket.on("data", (d: Buffer) => {
      if (size < MAX_RAW) chunks.push(d);
      size += d.length;
    });
    socket.once("error", done);
    socket.once("close", () => done());
  });
}

/** The status, headers and (de-chunked) body of the first HTTP/1.1 response in `raw`. */
function parseHttp1(raw: string): Pick<AttackAnswer, "status" | "headers" | "body"> {
  const end = raw.indexOf("\r\n\r\n");
  if (end < 0) return {};
  const [statusLine = "", ...lines] = raw.slice(0, end).split("\r\n");
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1]);
  const headers: Record<string, string> = {};
  for (const l of lines) {
    const i = l.indexOf(":");
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = raw.slice(end + 4);
  if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
    let out = "";
    for (let at = 0; ;) {
      const eol = body.indexOf("\r\n", at);
      const n = eol < 0 ? 0 : parseInt(body.slice(at, eol), 16);
      if (!n) break;
      out += body.slice(eol + 2, eol + 2 + n);
      at = eol + 2 + n + 2;
    }
    body = out;
  } else if (headers["content-length"]) body = body.slice(0, Number(headers["content-length"]));
  return { ...(Number.isInteger(status) ? { status } : {}), headers, body };
}

function http2Request(r: AttackRequest, token: string): Promise<AttackAnswer> {
  return new Promise((resolve) => {
    let answer: AttackAnswer = {};
    let body = "";
    const session = http2.connect(r.url, { rejectUnauthorized: false });
    const timer = setTimeout(() => session.destroy(new Error(`no end within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    let finished = false;
    const done = (error?: Error): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      session.close();
      resolve({ ...answer, body, ...(error ? { error: error.message } : {}) });
    };
    session.once("error", done);
    session.once("close", () => done(answer.status === undefined ? new Error("the session closed") : undefined));
    const stream = session.request(
      {
        ":method": r.method,
        ":path": r.path,
        authorization: `Bearer ${token}`,
        ...(r.headers ?? {}),
      },
      { endStream: r.body === undefined },
    );
    stream.setEncoding("utf8");
    stream.on("response", (h) => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(h)) if (!k.startsWith(":") && v !== undefined) headers[k] = String(v);
      answer = { status: Number(h[":status"]), headers };
    });
    stream.on("data", (d: string) => {
      if (body.length < MAX_RAW) body += d;
    });
    stream.once("end", () => done());
    stream.once("error", done);
    stream.once("close", () =>
      done(answer.status === undefined ? new Error(`stream closed (code ${stream.rstCode})`) : undefined),
    );
    if (r.body !== undefined) stream.end(r.body);
  });
}

const request = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8")) as AttackRequest;
const token = readFileSync(request.tokenFile, "utf8").trim();
try {
  console.log(JSON.stringify(await (request.proto === "h2" ? http2Request : http1)(request, token)));
} catch (err) {
  console.log(JSON.stringify({ error: errorMessage(err) }));
}
