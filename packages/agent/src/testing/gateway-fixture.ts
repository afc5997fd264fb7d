/**
 * Test-only: the gateway endpoint's world on loopback. A gateway CA and its client certificate,
 * an agent CA and the agent's serving certificate, a stand-in kube-apiserver and a stand-in
 * Service (https servers with certificates from their own CAs, recording what they receive), a
 * ServiceAccount directory (token, ca.crt) and the endpoint itself behind a loopback TCP port
 * (each accepted socket handed to {@link GatewayEndpoint.accept}, as the tunnel hands its streams).
 */
import { once } from "node:events";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import * as http2 from "node:http2";
import * as https from "node:https";
import * as net from "node:net";
import { connect as tlsConnect } from "node:tls";
import type { IncomingMessage, ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { createCertificateAuthority, issueCertificate, type CertificateAndKey } from "@cluster-proxy/pki";
import { MULTIPLEXED_SESSION_RESETS, silentLogger } from "@cluster-proxy/kit";
import { openInProcessStream } from "../gateway-endpoint/gateway-address.js";
import { GatewayEndpoint } from "../gateway-endpoint/gateway-endpoint.js";
import { ClusterUpstreams } from "../gateway-endpoint/gateway-upstreams.js";

/** The Service the stand-in answers as. */
export const TEST_SERVICE_HOST = "web.apps.svc";

/** What a stand-in received. */
export interface ReceivedRequest {
  method: string;
  url: string;
  /** Without HTTP/2 pseudo-headers (`:authority` is given as `host`). */
  rawHeaders: string[];
  body: string;
  /** `1.1` or `2.0`. */
  httpVersion: string;
}

/** A stand-in https server (apiserver or Service). */
export interface StandIn {
  port: number;
  received: ReceivedRequest[];
  /** TLS connections accepted so far. */
  connections(): number;
  /** HTTP/2 streams reset by the client so far (an HTTP/2 stand-in's cancelled requests). */
  resets(): number;
  /** TLS connections open now. */
  openConnections(): number;
  /** Send GOAWAY on every HTTP/2 session (their running streams finish). */
  goAway(): void;
  /** Lets `/stream` send its second chunk and end. */
  releaseStream(): void;
  /** Resolves when the next `/hold-head` request was received (it gets no answer until {@link releaseHeads}). */
  nextHeldHead(): Promise<void>;
  /** Answers every held `/hold-head` request (200, the echo); later ones are held again. */
  releaseHeads(): void;
  /** Bytes an upgraded connection received before its client ended (resolves on that end). */
  upgradeClientEnded: Promise<string>;
  close(): Promise<void>;
}

function pem(x: CertificateAndKey): { cert: string; key: string } {
  return { cert: x.certPem, key: x.keyPem };
}

async function readBody(req: AsyncIterable<unknown>): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Raw headers without HTTP/2 pseudo-headers, `:authority` given as `host` (as HTTP/1.1 has it). */
function plainHeaders(raw: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const [name, value] = [raw[i] ?? "", raw[i + 1] ?? ""];
    if (name === ":authority") out.push("host", value);
    else if (!name.startsWith(":")) out.push(name, value);
  }
  return out;
}

/**
 * Start a stand-in (`http2`: an HTTP/2 server that also speaks HTTP/1.1, as kube-apiserver is): `/stream` answers `first\n` at once and `second\n` after
 * {@link StandIn.releaseStream}; `/sized` answers `sized\n` with its Content-Length; `/whole-then-hold` sends its whole body of a declared length at once but
 * ends only after {@link StandIn.releaseStream}; `/hold-head...` is recorded, then answered (the echo) only after
 * {@link StandIn.releaseHeads}; `/status-600` answers status 600, `/http2-settings` with an
 * `HTTP2-Settings` and an `Upgrade` header (a hostile pod's answers); an upgrade (any protocol) is answered 101 and then echoes
 * `echo:<bytes>`, and after the client ends its writing sends `bye` and ends; every other path
 * answers 200 with what it received as JSON.
 */
async function startStandIn(
  identity: CertificateAndKey,
  http2Server = false,
  maxConcurrentStreams?: number,
): Promise<StandIn> {
  const received: ReceivedRequest[] = [];
  let connections = 0;
  let resets = 0;
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  let upgradeEnded: (text: string) => void = () => undefined;
  const upgradeClientEnded = new Promise<string>((resolve) => (upgradeEnded = resolve));
  let releaseHeads: () => void = () => undefined;
  let headsReleased = new Promise<void>((resolve) => (releaseHeads = resolve));
  const headWaiters: (() => void)[] = [];
  type Request = IncomingMessage | http2.Http2ServerRequest;
  type Response = ServerResponse | http2.Http2ServerResponse;
  const handle = (req: Request, res: Response): void => {
    void (async () => {
      const body = await readBody(req);
      const record = {
        method: req.method ?? "",
        url: req.url ?? "",
        rawHeaders: plainHeaders(req.rawHeaders),
        body,
        httpVersion: req.httpVersion,
      };
      received.push(record);
      if (req.url?.startsWith("/hold-head")) {
        for (const w of headWaiters.splice(0)) w();
        await headsReleased;
      }
      if (req.url === "/stream") {
        res.writeHead(200, { "Content-Type": "text/plain" });
        if ("stream" in res) res.write("first\n");
        else res.write("first\n");
        await released;
        res.end("second\n");
        return;
      }
      if (req.url === "/sized") {
        // Through node's compatibility layer END_STREAM follows the last DATA frame in a frame of its own.
        res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": "6" });
        res.end("sized\n");
        return;
      }
      if (req.url === "/whole-then-hold") {
        res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": "6" });
        if ("stream" in res) res.write("whole\n");
        else res.write("whole\n");
        await released;
        res.end();
        return;
      }
      // Answers a proxied pod may give that no caller can be handed as they are.
      if (req.url === "/status-600") {
        res.writeHead(600, { "Content-Type": "text/plain" });
        res.end("odd\n");
        return;
      }
      if (req.url === "/http2-settings") {
        res.writeHead(200, {
          "Content-Type": "text/plain",
          "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA",
          Upgrade: "h2c",
        });
        res.end("settings\n");
        return;
      }
      if (req.url === "/forbidden") {
        res.writeHead(403, { "Content-Type": "application/json" });
        res.end('{"kind":"Status","message":"forbidden"}');
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(record));
    })().catch(() => {
      // An answer HTTP/2 cannot carry (status 600, HTTP2-Settings): reset the stream.
      if ("stream" in res) res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      else res.destroy();
    });
  };
  const server = http2Server
    ? http2.createSecureServer(
        {
          ...pem(identity),
          allowHTTP1: true,
          // kube-apiserver (Go) closes no session for the streams its client resets; node's would after ~1,000.
          ...MULTIPLEXED_SESSION_RESETS,
          ...(maxConcurrentStreams !== undefined ? { settings: { maxConcurrentStreams } } : {}),
        },
        handle,
      )
    : https.createServer(pem(identity), handle);
  const sockets = new Set<Duplex>();
  server.on("secureConnection", (socket: Duplex) => {
    connections += 1;
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  if (http2Server)
    server.on("stream", (stream: http2.ServerHttp2Stream) =>
      stream.once("close", () => {
        if (stream.rstCode === http2.constants.NGHTTP2_CANCEL) resets += 1;
      }),
    );
  server.on("upgrade", (req: IncomingMessage, socket: Duplex) => {
    received.push({
      method: req.method ?? "",
      url: req.url ?? "",
      rawHeaders: req.rawHeaders,
      body: "",
      httpVersion: req.httpVersion,
    });
    if (req.url === "/no-upgrade") {
      socket.end("HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nnope");
      return;
    }
    socket.allowHalfOpen = true;
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${req.headers.upgrade ?? ""}\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n`,
    );
    let got = "";
    socket.on("data", (chunk: Buffer) => {
      got += chunk.toString("utf8");
      socket.write(`echo:${chunk.toString("utf8")}`);
    });
    socket.on("end", () => {
      upgradeEnded(got);
      socket.end("bye");
    });
    socket.on("error", () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    received,
    connections: () => connections,
    resets: () => resets,
    openConnections: () => sockets.size,
    goAway: () => {
      for (const session of sessions) session.close();
    },
    releaseStream: () => release(),
    nextHeldHead: () => new Promise<void>((resolve) => headWaiters.push(resolve)),
    releaseHeads: () => {
      const release = releaseHeads;
      headsReleased = new Promise<void>((resolve) => (releaseHeads = resolve));
      release();
    },
    upgradeClientEnded,
    close: () =>
      new Promise<void>((resolve) => {
        release();
        releaseHeads();
        if ("closeAllConnections" in server) server.closeAllConnections();
        else for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * A session to the endpoint as the gateway (several streams on it), once the endpoint's settings
 * arrived: over the loopback port, or with `inProcess` over an in-process stream handed to the
 * endpoint as the agent's tunnel hands it (a JS stream: a write completes a turn later).
 */
export async function callerSession(fx: GatewayFixture, inProcess = false): Promise<http2.ClientHttp2Session> {
  const tls = {
    ca: fx.agentCa,
    ...fx.gatewayClient,
    // The agent certificate names its cluster as a URI SAN, no host name.
    checkServerIdentity: () => undefined,
  };
  let session: http2.ClientHttp2Session;
  if (inProcess) {
    const { tunnelSide, endpointSide } = openInProcessStream();
    fx.endpoint.accept(endpointSide);
    session = http2.connect("https://gateway.endpoint", {
      createConnection: () => tlsConnect({ ...tls, socket: tunnelSide, ALPNProtocols: ["h2"] }),
    });
  } else session = http2.connect(`https://127.0.0.1:${fx.port}`, tls);
  session.on("error", () => undefined);
  await once(session, "remoteSettings");
  return session;
}

/** What {@link h2Call} got back. */
export interface H2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
}

/**
 * One request to the endpoint as the gateway sends it: an HTTP/2 stream of a fresh mutual-TLS
 * session (ALPN h2) to `port`. `headers` are pairs (a repeated name is sent repeated); `body`
 * undefined sends none (the HEADERS frame ends the stream); `onData` sees each chunk as it comes.
 */
export function h2Call(
  port: number,
  c: {
    path: string;
    method?: string;
    headers: [string, string][];
    body?: string | Buffer;
    client: { cert: string; key: string } | null;
    ca: string;
    onData?: (chunk: Buffer) => void;
  },
): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, {
      ca: c.ca,
      ...(c.client ?? {}),
      // The agent certificate names its cluster as a URI SAN, no host name.
      checkServerIdentity: () => undefined,
    });
    session.on("error", reject);
    const headers: http2.OutgoingHttpHeaders = { ":method": c.method ?? "GET", ":path": c.path };
    for (const [name, value] of c.headers) {
      const lower = name.toLowerCase();
      const had = headers[lower];
      headers[lower] = had === undefined ? value : Array.isArray(had) ? [...had, value] : [String(had), value];
    }
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: c.body === undefined });
    } catch (err) {
      session.destroy();
      reject(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    stream.on("error", (err: Error) => {
      session.destroy();
      reject(err);
    });
    let status = 0;
    let got: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      got = h;
    });
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      c.onData?.(chunk);
    });
    stream.on("end", () => {
      session.close();
      if (status === 0) reject(new Error("the stream ended without a response"));
      else resolve({ status, headers: got, body: Buffer.concat(chunks).toString("utf8") });
    });
    stream.on("close", () => {
      session.destroy();
      if (status === 0) reject(new Error(`the stream closed without a response (code ${stream.rstCode})`));
    });
    if (c.body !== undefined) stream.end(c.body);
  });
}

/** The endpoint and everything around it. */
export interface GatewayFixture {
  dir: string;
  /** Files: the gateway CA bundle, the ServiceAccount token. */
  paths: { gatewayCa: string; token: string; saDir: string; serviceCa: string };
  /** A client certificate from the gateway CA. */
  gatewayClient: { cert: string; key: string };
  /** A second gateway CA's client certificate (trusted only after a reload of the gateway CA file). */
  nextGatewayClient: { cert: string; key: string };
  nextGatewayCaPem: string;
  /** A client certificate from the agent CA (not the gateway CA): refused. */
  agentCaClient: { cert: string; key: string };
  /** The CA the endpoint's serving (agent) certificate chains to. */
  agentCa: string;
  /** The stand-in Service's CA and a CA unrelated to it (for the wrong-CA case). */
  serviceCaPem: string;
  strangerCaPem: string;
  endpoint: GatewayEndpoint;
  /** The loopback port in front of the endpoint. */
  port: number;
  apiserver: StandIn;
  service: StandIn;
  close(): Promise<void>;
}

/** Choices of {@link startGatewayFixture}. */
export interface GatewayFixtureOptions {
  /** What `--service-ca-file` holds: the stand-in Service's CA (default) or an unrelated one. */
  serviceCa?: "right" | "wrong";
  /** The endpoint's connection cap. */
  maxConnections?: number;
  /** The endpoint's HTTP/2 bounds. */
  maxConcurrentStreams?: number;
  idleSessionTimeoutMs?: number;
  /** The stand-in kube-apiserver speaks HTTP/2 too (ALPN `h2`, `allowHTTP1`), as a real one does. */
  apiserverHttp2?: boolean;
  /** The HTTP/2 stand-in kube-apiserver's SETTINGS_MAX_CONCURRENT_STREAMS. */
  apiserverMaxStreams?: number;
  /** Close the endpoint's upstream connections and sessions idle for this long. */
  upstreamIdleMs?: number;
}

/** Build the world. */
export async function startGatewayFixture(options: GatewayFixtureOptions = {}): Promise<GatewayFixture> {
  const serviceCa = options.serviceCa ?? "right";
  const dir = await mkdtemp(join(tmpdir(), "cp-gateway-"));
  const days = { validityDays: 2 };
  const gatewayCa = await createCertificateAuthority({ commonName: "gateway-ca", ...days });
  const nextGatewayCa = await createCertificateAuthority({ commonName: "gateway-ca-next", ...days });
  const agentCa = await createCertificateAuthority({ commonName: "agent-ca", ...days });
  const clusterCa = await createCertificateAuthority({ commonName: "cluster-ca", ...days });
  const serviceCaKey = await createCertificateAuthority({ commonName: "service-ca", ...days });
  const strangerCa = await createCertificateAuthority({ commonName: "stranger-ca", ...days });
  const client = (ca: CertificateAndKey, cn: string): Promise<CertificateAndKey> =>
    issueCertificate(ca, { commonName: cn, usage: "client", ...days });
  const agent = await issueCertificate(agentCa, {
    commonName: "agent",
    uris: ["cluster-proxy://cluster/east"],
    usage: "both",
    ...days,
  });
  const apiserverIdentity = await issueCertificate(clusterCa, {
    commonName: "kube-apiserver",
    ipAddresses: ["127.0.0.1"],
    usage: "server",
    ...days,
  });
  const serviceIdentity = await issueCertificate(serviceCaKey, {
    commonName: TEST_SERVICE_HOST,
    dnsNames: [TEST_SERVICE_HOST],
    usage: "server",
    ...days,
  });
  const saDir = join(dir, "sa");
  const paths = {
    gatewayCa: join(dir, "gateway-ca.crt"),
    token: join(saDir, "token"),
    saDir,
    serviceCa: join(dir, "service-ca.crt"),
  };
  await writeFile(paths.gatewayCa, gatewayCa.certPem);
  await mkdir(saDir);
  await writeFile(paths.token, "sa-token-1\n");
  await writeFile(join(saDir, "ca.crt"), clusterCa.certPem);
  await writeFile(paths.serviceCa, serviceCa === "right" ? serviceCaKey.certPem : strangerCa.certPem);
  const agentCert = join(dir, "agent.crt");
  const agentKey = join(dir, "agent.key");
  await writeFile(agentCert, agent.certPem);
  await writeFile(agentKey, agent.keyPem);

  const apiserver = await startStandIn(apiserverIdentity, options.apiserverHttp2 ?? false, options.apiserverMaxStreams);
  const service = await startStandIn(serviceIdentity);
  const upstreams = new ClusterUpstreams({
    apiserverUrl: new URL(`https://127.0.0.1:${apiserver.port}`),
    serviceAccountDir: saDir,
    serviceCaFile: paths.serviceCa,
    // The tests rotate the token and CA files and expect the next request to use them.
    fileRecheckMs: 0,
    ...(options.upstreamIdleMs !== undefined ? { idleSocketTimeoutMs: options.upstreamIdleMs } : {}),
    // <name>.<namespace>.svc is the stand-in Service on loopback (its port is in the header).
    serviceLookup: (_host, _options, callback) => callback(null, [{ address: "127.0.0.1", family: 4 }]),
  });
  const endpoint = new GatewayEndpoint({
    material: { cert: Buffer.from(agent.certPem), key: Buffer.from(agent.keyPem), ca: Buffer.from(gatewayCa.certPem) },
    files: {
      cert: { flag: "--agent-cert", path: agentCert },
      key: { flag: "--agent-key", path: agentKey },
      ca: { flag: "--gateway-ca-file", path: paths.gatewayCa },
    },
    reloadIntervalMs: 0,
    upstreams,
    logger: silentLogger,
    connectTimeoutMs: 5_000,
    ...(options.maxConnections !== undefined ? { maxConnections: options.maxConnections } : {}),
    ...(options.maxConcurrentStreams !== undefined ? { maxConcurrentStreams: options.maxConcurrentStreams } : {}),
    ...(options.idleSessionTimeoutMs !== undefined ? { idleSessionTimeoutMs: options.idleSessionTimeoutMs } : {}),
  });
  const front = net.createServer({ allowHalfOpen: true }, (socket) => endpoint.accept(socket));
  await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
  return {
    dir,
    paths,
    gatewayClient: pem(await client(gatewayCa, "gateway")),
    nextGatewayClient: pem(await client(nextGatewayCa, "gateway-next")),
    nextGatewayCaPem: nextGatewayCa.certPem,
    agentCaClient: pem(await client(agentCa, "some-agent")),
    agentCa: agentCa.certPem,
    serviceCaPem: serviceCaKey.certPem,
    strangerCaPem: strangerCa.certPem,
    endpoint,
    port: (front.address() as net.AddressInfo).port,
    apiserver,
    service,
    close: async () => {
      endpoint.close();
      await new Promise<void>((resolve) => front.close(() => resolve()));
      await apiserver.close();
      await service.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
