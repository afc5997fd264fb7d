/**
 * The gateway's pool dials through a real proxy-server: the dial of a request for cluster mc1 is
 * `gateway.cluster-proxy.invalid.mc1:443` through the tunnel; mc1's agent here has no gateway
 * endpoint, so it answers the dial with an error and the gateway answers 502 naming the cluster
 * and the cause. A cluster the hub knows but whose agent is not connected is 503.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import * as https from "node:https";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { parseGatewayOptions } from "@cluster-proxy/api";
import { Gateway, type AuditRecord } from "@cluster-proxy/gateway";
import { FakeHub } from "@cluster-proxy/gateway/testing";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { Harness, type ServerPorts } from "../framework/harness.js";

function get(port: number, path: string, ca: string, token: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    https
      .get(
        { host: "127.0.0.1", port, path, ca, agent: false, headers: { authorization: `Bearer ${token}` } },
        (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        },
      )
      .on("error", reject);
  });
}

describe("gateway through a real proxy-server", { timeout: 120_000 }, () => {
  const h = new Harness();
  let ports: ServerPorts;
  let gateway: Gateway;
  let port = 0;
  let servingCa = "";
  const audit: AuditRecord[] = [];

  before(async () => {
    await h.init(["mc1"]);
    ports = (await h.startServer()).ports;
    await h.startAgent("mc1", ports.agent);
    const ca = await createCertificateAuthority({ commonName: "gw-serving-ca", validityDays: 1 });
    const serving = await issueCertificate(ca, {
      commonName: "gw",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
      validityDays: 1,
    });
    const gwCa = await createCertificateAuthority({ commonName: "gw-ca", validityDays: 1 });
    const identity = await issueCertificate(gwCa, { commonName: "gateway", usage: "client", validityDays: 1 });
    servingCa = ca.certPem;
    const files = {
      "gw.crt": serving.certPem,
      "gw.key": serving.keyPem,
      "id.crt": identity.certPem,
      "id.key": identity.keyPem,
    };
    for (const [name, pem] of Object.entries(files)) await writeFile(join(h.dir, name), pem);
    const hub = new FakeHub();
    hub.addCluster("mc1");
    hub.addCluster("mc2");
    hub.tokens.set("t", { username: "alice", groups: [], extra: {} });
    hub.grantProxy("alice", "mc1", "get");
    hub.grantProxy("alice", "mc2", "get");
    const c = h.certs;
    gateway = new Gateway(
      parseGatewayOptions({
        port: 0,
        healthPort: 0,
        servingCert: join(h.dir, "gw.crt"),
        servingKey: join(h.dir, "gw.key"),
        proxyServerHost: "127.0.0.1",
        proxyServerPort: ports.server,
        proxyCa: c.ca.cert,
        proxyCert: c.client.cert,
        proxyKey: c.client.key,
        identityCert: join(h.dir, "id.crt"),
        identityKey: join(h.dir, "id.key"),
        agentCa: c.agentCa.cert,
        namespace: "cluster-proxy",
        dialTimeout: 10_000,
      }),
      {
        hub,
        bindAddress: "127.0.0.1",
        audit: { write: (r) => void (r.stage !== "start" && audit.push(r)), close: () => undefined },
      },
    );
    port = (await gateway.start()).port;
  });
  after(async () => {
    await gateway?.close(0);
    await h.close();
  });

  test("an agent without the endpoint answers the dial with an error: 502 naming the cluster", async () => {
    const r = await get(port, "/mc1/api/v1/pods", servingCa, "t");
    // The agent got the reserved address (the server cut the cluster suffix) and, without
    // --gateway-ca-file, refused it in its own words.
    assert.equal(r.status, 502, r.body);
    assert.match(
      r.body,
      /^cluster "mc1": the agent could not open its gateway endpoint: gateway endpoint not enabled on this agent \(--gateway-ca-file unset\)/,
    );
    assert.equal(r.body.trim().split("\n").length, 1);
    assert.equal(audit.at(-1)?.decision, "error");
  });

  test("a cluster without a connected agent: 503", async () => {
    const r = await get(port, "/mc2/api/v1/pods", servingCa, "t");
    assert.equal(r.status, 503, r.body);
    assert.match(r.body, /^cluster "mc2" has no connected agent/);
  });
});
