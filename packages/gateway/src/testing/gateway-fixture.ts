/**
 * Test-only: a running {@link Gateway} on loopback with its own PKI (serving, gateway, agent and
 * client CAs in a temp directory), a {@link FakeHub}, a {@link FakeEndpoint} for clusters mc1 and
 * mc2 reached through the injected dialer, audit records collected in memory, and a request
 * helper that trusts the serving CA.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { once } from "node:events";
import * as http2 from "node:http2";
import * as https from "node:https";
import * as net from "node:net";
import * as tls from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseGatewayOptions, type GatewayOptions, type GatewayOptionsInput } from "@cluster-proxy/api";
import {
  agentClusterUri,
  createCertificateAuthority,
  issueCertificate,
  type CertificateAndKey,
} from "@cluster-proxy/pki";
import { realClock, type Clock, type Logger } from "@cluster-proxy/kit";
import type { AuditLine, AuditRecord } from "../audit-log.js";
import type { Dialer } from "../cluster-pool.js";
import { Gateway, type CallerLimits, type FleetSettings } from "../gateway.js";
import { FakeEndpoint } from "./fake-endpoint.js";
import { FAKE_HUB_API_AUDIENCE, FakeHub } from "./fake-hub.js";

/** A response read to its end. */
export interface TestResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** What a test gets. */
export interface GatewayFixture {
  gateway: Gateway;
  /** The options the gateway was started with (its files are in {@link dir}). */
  options: GatewayOptions;
  hub: FakeHub;
  endpoint: FakeEndpoint;
  port: number;
  healthPort: number;
  dir: string;
  servingCa: Buffer;
  /** A client certificate of the client CA (CN carol, O devs). */
  client: { cert: Buffer; key: Buffer };
  /** The serving CA (to issue new serving certificates). */
  servingAuthority: CertificateAndKey;
  /** The gateway CA (to issue new identities). */
  gatewayAuthority: CertificateAndKey;
  /** The audit records of requests that ended, in order. */
  audit: AuditRecord[];
  /** Every audit line in order: the records, and the start lines of long-running requests. */
  auditLines: AuditLine[];
  /**
   * Move the fixture's clock (`now()` only, its timers are real ones) forward (expire cached hub
   * answers) or back; not a `clock` given in the options, which the test moves itself.
   */
  advance(ms: number): void;
  /** Send a request to the gateway and read the whole answer. */
  request(
    path: string,
    opts?: { method?: string; headers?: Record<string, string | string[]>; body?: string; cert?: Buffer; key?: Buffer },
  ): Promise<TestResponse>;
  /**
   * A raw TLS connection to the gateway (trusting the serving CA, HTTP/1.1 by ALPN), resolved once
   * the handshake is done: for upgrades and hand-written requests.
   */
  tlsConnect(): Promise<tls.TLSSocket>;
  close(): Promise<void>;
}

/** Options of {@link startGatewayFixture}. */
export interface FixtureOptions {
  options?: GatewayOptionsInput;
  /** Trust the fixture's client CA (--client-ca-file). */
  clientCa?: boolean;
  /** Accept ID tokens of this issuer (--oidc-*: client id `gateway`, username claim email, groups claim groups, prefix oidc:). */
  oidc?: { issuerUrl: string; ca: Buffer };
  /** Bounds on callers (default: the gateway's). */
  limits?: Partial<CallerLimits>;
  /** Replace the endpoint's dialer (e.g. one that fails). */
  dialer?: (endpointDialer: Dialer) => Dialer;
  /** The fleet view's settings (default: no page, the gateway's other defaults). */
  fleet?: FleetSettings;
  /**
   * The gateway's clock, e.g. a ManualClock (default: real timers and `Date.now()` shifted by
   * {@link GatewayFixture.advance}).
   */
  clock?: Clock;
  /** Where the gateway logs (default: nowhere). */
  logger?: Logger;
}

const DAYS = 2;

/** Start a gateway; see the module comment. */
export async function startGatewayFixture(f: FixtureOptions = {}): Promise<GatewayFixture> {
  const dir = await mkdtemp(join(tmpdir(), "cp-gateway-"));
  const servingCa = await createCertificateAuthority({ commonName: "serving-ca", validityDays: DAYS });
  const gatewayCa = await createCertificateAuthority({ commonName: "gateway-ca", validityDays: DAYS });
  const agentCa = await createCertificateAuthority({ commonName: "agent-ca", validityDays: DAYS });
  const clientCa = await createCertificateAuthority({ commonName: "client-ca", validityDays: DAYS });
  const serving = await issueCertificate(servingCa, {
    commonName: "gateway",
    dnsNames: ["localhost"],
    ipAddresses: ["127.0.0.1"],
    usage: "server",
    validityDays: DAYS,
  });
  const identity = await issueCertificate(gatewayCa, {
    commonName: "cluster-proxy-gateway",
    usage: "client",
    validityDays: DAYS,
  });
  const agent = await issueCertificate(agentCa, {
    commonName: "agent",
    uris: ["mc1", "mc2"].map(agentClusterUri),
    usage: "both",
    validityDays: DAYS,
  });
  const client = await issueCertificate(clientCa, {
    commonName: "carol",
    organization: "devs",
    usage: "client",
    validityDays: DAYS,
  });
  const files: Record<string, string> = {
    "serving.crt": serving.certPem,
    "serving.key": serving.keyPem,
    "identity.crt": identity.certPem,
    "identity.key": identity.keyPem,
    "agent-ca.crt": agentCa.certPem,
    "client-ca.crt": clientCa.certPem,
  };
  if (f.oidc) files["oidc-ca.crt"] = f.oidc.ca.toString();
  // The gateway's own mounted ServiceAccount token: its aud names the hub apiserver's audience.
  const saClaims = { aud: [FAKE_HUB_API_AUDIENCE], sub: "system:serviceaccount:cluster-proxy:gateway" };
  files["sa.token"] = ["e30", Buffer.from(JSON.stringify(saClaims)).toString("base64url"), "c2ln"].join(".");
  for (const [name, pem] of Object.entries(files)) await writeFile(join(dir, name), pem);
  const endpoint = new FakeEndpoint({
    cert: Buffer.from(agent.certPem),
    key: Buffer.from(agent.keyPem),
    ca: Buffer.from(gatewayCa.certPem),
  });
  await endpoint.start();
  const hub = new FakeHub();
  hub.addCluster("mc1");
  hub.addCluster("mc2");
  const audit: AuditRecord[] = [];
  const auditLines: AuditLine[] = [];
  const options = parseGatewayOptions({
    port: 0,
    healthPort: 0,
    servingCert: join(dir, "serving.crt"),
    servingKey: join(dir, "serving.key"),
    proxyServerHost: "127.0.0.1",
    proxyCa: join(dir, "unused"),
    proxyCert: join(dir, "unused"),
    proxyKey: join(dir, "unused"),
    identityCert: join(dir, "identity.crt"),
    identityKey: join(dir, "identity.key"),
    agentCa: join(dir, "agent-ca.crt"),
    namespace: "cluster-proxy",
    ...(f.clientCa ? { clientCaFile: join(dir, "client-ca.crt") } : {}),
    ...(f.oidc
      ? {
          oidcIssuerUrl: f.oidc.issuerUrl,
          oidcClientId: "gateway",
          oidcCaFile: join(dir, "oidc-ca.crt"),
          oidcUsernameClaim: "email",
          oidcGroupsClaim: "groups",
          oidcGroupsPrefix: "oidc:",
        }
      : {}),
    ...f.options,
  });
  const endpointDialer = endpoint.dialer();
  let offset = 0;
  const clock: Clock = f.clock ?? {
    now: () => Date.now() + offset,
    setTimeout: (fn, ms) => realClock.setTimeout(fn, ms),
    clearTimeout: (handle) => realClock.clearTimeout(handle),
  };
  const gateway = new Gateway(options, {
    hub,
    dialer: f.dialer ? f.dialer(endpointDialer) : endpointDialer,
    audit: {
      write: (r) => {
        auditLines.push(structuredClone(r));
        if (r.stage !== "start") audit.push(structuredClone(r));
      },
      close: () => undefined,
    },
    bindAddress: "127.0.0.1",
    clock,
    ...(f.limits ? { limits: f.limits } : {}),
    ...(f.logger ? { logger: f.logger } : {}),
    fleet: { assets: new Map(), ...f.fleet },
    serviceAccountTokenFile: join(dir, "sa.token"),
  });
  const { port, healthPort } = await gateway.start();
  const ca = Buffer.from(servingCa.certPem);
  return {
    gateway,
    options,
    hub,
    endpoint,
    port,
    healthPort,
    dir,
    servingCa: ca,
    servingAuthority: servingCa,
    gatewayAuthority: gatewayCa,
    client: { cert: Buffer.from(client.certPem), key: Buffer.from(client.keyPem) },
    audit,
    auditLines,
    advance: (ms) => void (offset += ms),
    tlsConnect: async () => {
      const socket = tls.connect({ host: "127.0.0.1", port, ca, servername: "localhost", ALPNProtocols: ["http/1.1"] });
      await once(socket, "secureConnect");
      return socket;
    },
    request: (path, opts = {}) =>
      new Promise((resolve, reject) => {
        const req = https.request(
          {
            host: "127.0.0.1",
            port,
            path,
            method: opts.method ?? "GET",
            ca,
            agent: false,
            headers: opts.headers ?? {},
            ...(opts.cert ? { cert: opts.cert, key: opts.key } : {}),
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () =>
              resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }),
            );
          },
        );
        req.on("error", reject);
        req.end(opts.body);
      }),
    close: async () => {
      await gateway.close(0);
      await endpoint.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * An HTTP/2 session to `f`'s port from `localAddress` (a loopback address of its own, so that it
 * counts as a client of its own), with the client certificate `cert` if given.
 */
export function h2From(
  f: GatewayFixture,
  localAddress: string,
  cert?: { cert: Buffer; key: Buffer },
): http2.ClientHttp2Session {
  const session = http2.connect(`https://127.0.0.1:${f.port}`, {
    createConnection: () =>
      tls.connect({
        socket: net.connect({ host: "127.0.0.1", port: f.port, localAddress }),
        ca: f.servingCa,
        servername: "localhost",
        ALPNProtocols: ["h2"],
        ...cert,
      }),
  });
  session.on("error", () => undefined);
  return session;
}
