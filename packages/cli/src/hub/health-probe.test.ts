import assert from "node:assert/strict";
import { once } from "node:events";
import { connect, createServer as createTcpServer, type AddressInfo, type Server } from "node:net";
import type { Duplex } from "node:stream";
import { createServer, type Server as TlsServer } from "node:tls";
import { after, before, describe, test } from "node:test";
import { agentClusterUri, createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { probeGatewayEndpoint, type TunnelDialer } from "./health-probe.js";

describe("the gateway endpoint probe (health -o wide: GATEWAY)", () => {
  let endpoint: TlsServer;
  let silent: Server;
  let agentCa: Buffer;
  let otherCa: Buffer;
  const dialled: string[] = [];
  const handshakes: string[] = [];

  before(async () => {
    const agent = await createCertificateAuthority({ commonName: "agent-ca" });
    const gateway = await createCertificateAuthority({ commonName: "gateway-ca" });
    const other = await createCertificateAuthority({ commonName: "other-ca" });
    agentCa = Buffer.from(agent.certPem);
    otherCa = Buffer.from(other.certPem);
    const cert = await issueCertificate(agent, {
      commonName: "agent",
      uris: [agentClusterUri("mc1")],
      usage: "both",
      validityDays: 1,
    });
    // As the contract has it: the agent's certificate, a client certificate of the gateway CA required.
    endpoint = createServer({
      cert: cert.certPem,
      key: cert.keyPem,
      ca: gateway.certPem,
      requestCert: true,
      rejectUnauthorized: true,
    });
    endpoint.on("secureConnection", (s) => handshakes.push(String(s.authorized)));
    endpoint.on("tlsClientError", () => handshakes.push("refused"));
    endpoint.listen(0, "127.0.0.1");
    silent = createTcpServer(() => undefined);
    silent.listen(0, "127.0.0.1");
    await Promise.all([once(endpoint, "listening"), once(silent, "listening")]);
  });
  after(() => {
    endpoint.close();
    silent.close();
  });

  const dialTo =
    (server: { address(): AddressInfo | string | null }): TunnelDialer =>
    (address: string): Promise<Duplex> => {
      dialled.push(address);
      const s = connect((server.address() as AddressInfo).port, "127.0.0.1");
      return once(s, "connect").then(() => s);
    };

  test("the cluster's agent certificate, verified against the agent CA, without offering a certificate", async () => {
    const r = await probeGatewayEndpoint(dialTo(endpoint), "mc1", agentCa, 5000);
    assert.equal(r.reason, "");
    assert.equal(r.ok, true);
    assert.equal(dialled.at(-1), "gateway.cluster-proxy.invalid.mc1:443");
    assert.ok(!handshakes.includes("true"), "no session was ever authorized");
  });

  test("another cluster's certificate, another CA, no endpoint, no answer: not ok, with the reason", async () => {
    const wrongCluster = await probeGatewayEndpoint(dialTo(endpoint), "mc2", agentCa, 5000);
    assert.equal(wrongCluster.ok, false);
    assert.match(wrongCluster.reason, /^gateway endpoint: the endpoint's certificate is not mc2's/);
    const wrongCa = await probeGatewayEndpoint(dialTo(endpoint), "mc1", otherCa, 5000);
    assert.equal(wrongCa.ok, false);
    assert.match(wrongCa.reason, /^gateway endpoint: .*(certificate|issuer)/i);
    const noEndpoint = await probeGatewayEndpoint(
      () => Promise.reject(new Error("dial gateway.cluster-proxy.invalid:443: no such host")),
      "mc1",
      agentCa,
      5000,
    );
    assert.deepEqual(noEndpoint, {
      ok: false,
      reason: "gateway endpoint: dial gateway.cluster-proxy.invalid:443: no such host",
    });
    const silence = await probeGatewayEndpoint(dialTo(silent), "mc1", agentCa, 300);
    assert.deepEqual(silence, { ok: false, reason: "gateway endpoint: no answer within 0.3s" });
  });
});
