/**
 * The agent's gateway endpoint through a real proxy-server and agents (docs/design/gateway.md): a
 * TLS client holding a gateway-CA certificate dials `gateway.cluster-proxy.invalid.<cluster>:443`
 * through the server's gRPC front door with the SDK's TunnelClient, checks the agent certificate's
 * cluster URI SAN, and gets an impersonated answer from a stand-in kube-apiserver; an agent
 * without --gateway-ca-file refuses the dial with a clear text.
 */
import assert from "node:assert/strict";
import { mkdir, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import * as http2 from "node:http2";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import type { TunnelClient } from "@cluster-proxy/client";
import { DialError } from "@cluster-proxy/client";
import { clusterNamesFromCertificate, createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { Harness, type ServerPorts } from "../framework/harness.js";

interface Seen {
  url: string;
  rawHeaders: string[];
}

function values(raw: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]?.toLowerCase() === name) out.push(raw[i + 1] ?? "");
  return out;
}

describe("gateway endpoint through a proxy-server and agent", () => {
  const h = new Harness();
  let ports: ServerPorts;
  let client: TunnelClient;
  const seen: Seen[] = [];
  let gatewayClient: { cert: string; key: string };
  let agentCa: Buffer;

  before(async () => {
    await h.init(["east", "west"]);
    const days = { validityDays: 1 };
    const gatewayCa = await createCertificateAuthority({ commonName: "gateway-ca", ...days });
    const leaf = await issueCertificate(gatewayCa, { commonName: "cluster-proxy-gateway", usage: "client", ...days });
    gatewayClient = { cert: leaf.certPem, key: leaf.keyPem };
    const clusterCa = await createCertificateAuthority({ commonName: "east-cluster-ca", ...days });
    const apiIdentity = await issueCertificate(clusterCa, {
      commonName: "kube-apiserver",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      ...days,
    });
    const gatewayCaFile = join(h.dir, "gateway-ca.crt");
    await writeFile(gatewayCaFile, gatewayCa.certPem);
    const saDir = join(h.dir, "sa");
    await mkdir(saDir);
    await writeFile(join(saDir, "token"), "east-agent-sa-token\n");
    await writeFile(join(saDir, "ca.crt"), clusterCa.certPem);

    const api = https.createServer({ cert: apiIdentity.certPem, key: apiIdentity.keyPem }, (req, res) => {
      seen.push({ url: req.url ?? "", rawHeaders: req.rawHeaders });
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ kind: "SelfSubjectReview", user: req.headers["impersonate-user"] }));
    });
    await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
    h.onClose(
      () =>
        new Promise<void>((resolve) => {
          api.closeAllConnections();
          api.close(() => resolve());
        }),
    );
    const apiPort = (api.address() as AddressInfo).port;

    ports = (await h.startServer()).ports;
    await h.startAgent("east", ports.agent, [
      `--gateway-ca-file=${gatewayCaFile}`,
      `--kube-apiserver-url=https://127.0.0.1:${apiPort}`,
      `--service-account-dir=${saDir}`,
    ]);
    await h.startAgent("west", ports.agent);
    agentCa = readFileSync(h.certs.agentCa.cert);
    client = h.tunnelClient(ports.server);
  });
  after(async () => {
    await h.close();
  });

  test("a gateway-CA client reaches the stand-in apiserver as the impersonated user", async () => {
    const stream = await client.dial("gateway.cluster-proxy.invalid.east:443");
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      // As the gateway does: one HTTP/2 session (ALPN h2) over the tunnelled stream.
      const session = http2.connect("https://gateway.cluster-proxy.invalid", {
        createConnection: () =>
          tls.connect({
            socket: stream,
            ca: agentCa,
            ...gatewayClient,
            ALPNProtocols: ["h2"],
            // The agent serves with its agent certificate: its cluster is the URI SAN.
            checkServerIdentity: (_host, cert) =>
              clusterNamesFromCertificate(cert.raw).includes("east")
                ? undefined
                : new Error("not the east agent's certificate"),
          }),
      });
      session.on("error", reject);
      const req = session.request({
        ":method": "POST",
        ":path": "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        "cluster-proxy-target": "kube",
        "impersonate-user": "cluster:hub:alice",
        "impersonate-group": "cluster:hub:devs",
        authorization: "Bearer hub-token",
        "content-type": "application/json",
        "content-length": "2",
      });
      req.on("error", reject);
      let status = 0;
      req.on("response", (h) => (status = Number(h[":status"])));
      let body = "";
      req.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
      req.on("end", () => {
        session.close();
        resolve({ status, body });
      });
      req.end("{}");
    });
    assert.equal(answer.status, 200, answer.body);
    assert.deepEqual(JSON.parse(answer.body), { kind: "SelfSubjectReview", user: "cluster:hub:alice" });
    const got = seen.at(-1);
    assert.ok(got);
    assert.equal(got.url, "/apis/authentication.k8s.io/v1/selfsubjectreviews");
    assert.deepEqual(values(got.rawHeaders, "authorization"), ["Bearer east-agent-sa-token"]);
    assert.deepEqual(values(got.rawHeaders, "impersonate-group"), ["cluster:hub:devs"]);
    assert.deepEqual(values(got.rawHeaders, "cluster-proxy-target"), []);
    stream.destroy();
  });

  test("an agent without --gateway-ca-file refuses the dial with a clear text", async () => {
    await assert.rejects(
      client.dial("gateway.cluster-proxy.invalid.west:443"),
      (e: Error) =>
        e instanceof DialError &&
        e.message.includes("gateway endpoint not enabled on this agent (--gateway-ca-file unset)"),
    );
  });
});
