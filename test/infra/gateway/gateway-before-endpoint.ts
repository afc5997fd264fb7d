/**
 * The real gateway in process, in front of a real agent gateway endpoint on loopback (no tunnel:
 * what crosses the hop is the same): its own serving CA, the endpoint fixture's gateway identity
 * and agent CA, a fake hub where `alice` (bearer {@link ALICE_TOKEN}) may use every verb on
 * cluster `east`. Used by the integration suites of the hop (gateway-hop, gateway-retry).
 */
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import * as http2 from "node:http2";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseGatewayOptions } from "@cluster-proxy/api";
import { Gateway } from "@cluster-proxy/gateway";
import { FakeHub } from "@cluster-proxy/gateway/testing";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import type { GatewayFixture } from "../../../packages/agent/src/testing/gateway-fixture.js";

/** alice's hub token. */
export const ALICE_TOKEN = "alice-token";

/** What one HTTP/2 request got: status (0: none), response headers, body, and the stream's reset code. */
export interface H2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
  reset?: number;
}

/** A running gateway in front of an endpoint. */
export interface GatewayBeforeEndpoint {
  gateway: Gateway;
  port: number;
  healthPort: number;
  /** PEM: the CA that verifies the gateway as `localhost`. */
  servingCa: string;
  /** One HTTP/2 request as alice on a session of its own; `body` undefined ends the stream with the HEADERS frame. */
  h2(headers: http2.OutgoingHttpHeaders, body?: string): Promise<H2Answer>;
  close(): Promise<void>;
}

async function h2Request(
  port: number,
  servingCa: string,
  headers: http2.OutgoingHttpHeaders,
  body?: string,
): Promise<H2Answer> {
  const session = http2.connect(`https://127.0.0.1:${port}`, { ca: servingCa, servername: "localhost" });
  session.on("error", () => undefined);
  try {
    const stream = session.request(
      { authorization: `Bearer ${ALICE_TOKEN}`, ...headers },
      { endStream: body === undefined },
    );
    if (body !== undefined) stream.end(body);
    return await new Promise((resolve) => {
      let status = 0;
      let got: http2.IncomingHttpHeaders = {};
      let text = "";
      stream.on("response", (h) => {
        status = Number(h[":status"]);
        got = h;
      });
      stream.on("data", (c: Buffer) => (text += c.toString()));
      stream.on("error", () => undefined);
      stream.on("close", () => resolve({ status, headers: got, body: text, reset: stream.rstCode }));
    });
  } finally {
    session.close();
  }
}

/** Start a gateway whose every dial connects to `endpointPort` on loopback (the fixture's, or a relay in front of it). */
export async function startGatewayBeforeEndpoint(
  fx: GatewayFixture,
  endpointPort: number,
): Promise<GatewayBeforeEndpoint> {
  const dir = await mkdtemp(join(tmpdir(), "cp-gw-endpoint-"));
  const ca = await createCertificateAuthority({ commonName: "gw-serving-ca", validityDays: 1 });
  const serving = await issueCertificate(ca, {
    commonName: "gw",
    dnsNames: ["localhost"],
    ipAddresses: ["127.0.0.1"],
    usage: "server",
    validityDays: 1,
  });
  const files = {
    "gw.crt": serving.certPem,
    "gw.key": serving.keyPem,
    "id.crt": fx.gatewayClient.cert,
    "id.key": fx.gatewayClient.key,
    "agent-ca.crt": fx.agentCa,
  };
  for (const [name, pem] of Object.entries(files)) await writeFile(join(dir, name), pem);
  const hub = new FakeHub();
  hub.addCluster("east");
  hub.tokens.set(ALICE_TOKEN, { username: "alice", groups: [], extra: {} });
  hub.grantProxy("alice", "east", "get", "list", "create", "update", "patch", "delete");
  const gateway = new Gateway(
    parseGatewayOptions({
      port: 0,
      healthPort: 0,
      servingCert: join(dir, "gw.crt"),
      servingKey: join(dir, "gw.key"),
      proxyServerHost: "127.0.0.1",
      proxyCa: join(dir, "unused"),
      proxyCert: join(dir, "unused"),
      proxyKey: join(dir, "unused"),
      identityCert: join(dir, "id.crt"),
      identityKey: join(dir, "id.key"),
      agentCa: join(dir, "agent-ca.crt"),
      namespace: "cluster-proxy",
    }),
    {
      hub,
      // Loopback stands in for the tunnel dial.
      dialer: async () => {
        const socket = net.connect(endpointPort, "127.0.0.1");
        await once(socket, "connect");
        return socket;
      },
      bindAddress: "127.0.0.1",
      fleet: { assets: new Map() },
    },
  );
  const { port, healthPort } = await gateway.start();
  return {
    gateway,
    port,
    healthPort,
    servingCa: ca.certPem,
    h2: (headers, body) => h2Request(port, ca.certPem, headers, body),
    close: async () => {
      await gateway.close(0);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
