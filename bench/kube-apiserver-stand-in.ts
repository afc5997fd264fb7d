/**
 * The managed cluster's kube-apiserver as bench/gateway.ts needs it: an HTTPS server on 127.0.0.1
 * that answers `GET /api/v1/namespaces/default` with a small Namespace at once, and holds watches
 * (any GET with `watch=true` or `watch=1`) open, writing one MODIFIED event per watch every period
 * while events are on. It checks no credentials; it counts requests by how they were
 * authenticated (Impersonate-User set, or not) so the bench can tell the gateway's requests
 * arrived impersonated, and the TLS connections it accepted (how well clients reuse theirs).
 * Like a kube-apiserver it offers HTTP/2 by ALPN (at most {@link MAX_STREAMS} streams per
 * connection, Go's default) and HTTP/1.1: the agent's gateway endpoint picks HTTP/2, as it does
 * with a real apiserver; the bench's HTTP/1.1 clients (paths b, c, d) get HTTP/1.1.
 *
 *   node --import tsx kube-apiserver-stand-in.ts '{"cert":"...","key":"..."}'
 *
 * Prints `{"port":<port>}` on stdout once listening. Reads commands from stdin, one a line:
 * `events <ms>` (every open and later watch gets an event every <ms>, 0 = none, the start).
 * `GET /_bench/stats` answers {@link StandInStats}. Runs until killed or stdin closes.
 */
import { once } from "node:events";
import { readFileSync } from "node:fs";
import type { ServerResponse } from "node:http";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { createInterface } from "node:readline";

/** What `GET /_bench/stats` answers. */
export interface StandInStats {
  /** Watches open now. */
  watches: number;
  /** Requests served (watches and `_bench` excluded), by whether they carried Impersonate-User. */
  impersonated: number;
  notImpersonated: number;
  /** The last Impersonate-User seen. */
  lastImpersonateUser: string;
  /** The raw headers (name, value, ...) of that last impersonated request. */
  lastImpersonatedHeaders: string[];
  /** Watch events written since the start. */
  events: number;
  /** TLS connections accepted since the start (how well clients reuse theirs). */
  connections: number;
}

const args = JSON.parse(process.argv[2] ?? "{}") as { cert: string; key: string };
const NAMESPACE = JSON.stringify({
  kind: "Namespace",
  apiVersion: "v1",
  metadata: { name: "default", uid: "4a7d4e8a-6c2e-4b51-9b1e-3f2b8c6d0a11", resourceVersion: "42" },
  spec: { finalizers: ["kubernetes"] },
  status: { phase: "Active" },
});

const NAMESPACE_LENGTH = Buffer.byteLength(NAMESPACE);

const stats: StandInStats = {
  watches: 0,
  impersonated: 0,
  notImpersonated: 0,
  lastImpersonateUser: "",
  lastImpersonatedHeaders: [],
  events: 0,
  connections: 0,
};
let periodMs = 0;
/** A watch is ended after this long, as an apiserver ends watches (the bench's take minutes). */
const WATCH_LIFETIME_MS = 15 * 60_000;
let resourceVersion = 1000;

/** SETTINGS_MAX_CONCURRENT_STREAMS of its HTTP/2 connections (Go's default, which the kube-apiserver keeps). */
const MAX_STREAMS = 250;

/** A response over HTTP/1.1 or HTTP/2. */
type AnyResponse = ServerResponse | http2.Http2ServerResponse;

/** An open watch and its timers. */
interface Watch {
  res: AnyResponse;
  timers: NodeJS.Timeout[];
}
const watches = new Set<Watch>();

function eventLine(): string {
  resourceVersion++;
  return `${JSON.stringify({
    type: "MODIFIED",
    object: {
      kind: "ConfigMap",
      apiVersion: "v1",
      metadata: { name: "bench", namespace: "default", resourceVersion: String(resourceVersion) },
      data: { n: String(resourceVersion) },
    },
  })}\n`;
}

/** (Re)start `w`'s events at the current period, at a random phase so they spread over the period. */
function schedule(w: Watch): void {
  for (const t of w.timers.splice(0)) clearTimeout(t);
  if (periodMs <= 0) return;
  const p = periodMs;
  w.timers.push(
    setTimeout(
      () => {
        const tick = (): void => {
          stats.events++;
          const line = eventLine();
          if ("stream" in w.res) w.res.write(line);
          else w.res.write(line);
        };
        tick();
        w.timers.push(setInterval(tick, p));
      },
      Math.floor(Math.random() * p),
    ),
  );
}

const server = http2.createSecureServer(
  {
    cert: readFileSync(args.cert),
    key: readFileSync(args.key),
    allowHTTP1: true,
    settings: { maxConcurrentStreams: MAX_STREAMS },
  },
  (req, res: AnyResponse) => {
    const url = new URL(req.url ?? "/", "https://stand-in");
    if (url.pathname === "/_bench/stats") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(stats));
      return;
    }
    const watch = url.searchParams.get("watch");
    if (req.method === "GET" && (watch === "true" || watch === "1")) {
      // Over HTTP/2 the head goes out with writeHead.
      res.writeHead(200, { "content-type": "application/json", "cache-control": "no-cache" });
      if (!("stream" in res)) res.flushHeaders();
      const w: Watch = { res, timers: [] };
      watches.add(w);
      stats.watches++;
      schedule(w);
      const end = setTimeout(() => res.end(), WATCH_LIFETIME_MS);
      res.on("close", () => {
        clearTimeout(end);
        for (const t of w.timers) clearTimeout(t);
        if (watches.delete(w)) stats.watches--;
      });
      return;
    }
    const user = req.headers["impersonate-user"];
    if (typeof user === "string") {
      stats.impersonated++;
      stats.lastImpersonateUser = user;
      stats.lastImpersonatedHeaders = req.rawHeaders;
    } else {
      stats.notImpersonated++;
    }
    if (req.method === "GET" && url.pathname === "/api/v1/namespaces/default") {
      // With its length, as a kube-apiserver answers a small object (Go sets it for a body it buffered whole).
      res.writeHead(200, { "content-type": "application/json", "content-length": NAMESPACE_LENGTH });
      res.end(NAMESPACE);
      return;
    }
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", reason: "NotFound", code: 404 }));
  },
);
server.on("secureConnection", () => void stats.connections++);
// HTTP/1.1 keep-alive connections stay (as Node's https server with this keepAliveTimeout); @types/node
// does not declare it on Http2SecureServer.
Object.assign(server, { keepAliveTimeout: 120_000 });
server.maxConnections = 20_000;
server.listen({ port: 0, host: "127.0.0.1", backlog: 4096 });
await once(server, "listening");
process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  const [cmd, arg] = line.trim().split(/\s+/);
  if (cmd === "events") {
    periodMs = Math.max(0, Number(arg) || 0);
    for (const w of watches) schedule(w);
  }
});
lines.on("close", () => process.exit(0));
