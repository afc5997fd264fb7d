import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, X509Certificate } from "node:crypto";
import type * as net from "node:net";
import type { ServerOptions } from "@cluster-proxy/api";
import { agentClusterUri, createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { parseAgentIdentifiers } from "@cluster-proxy/protocol";
import { GrpcStatus } from "@cluster-proxy/tunnel";
import { checkAgentIdentifiers, grantedHosts, serviceProxyHost, verifyAgentIdentity } from "./agent-identity.js";
import { ProxyServer } from "../proxy-server.js";
import { connectFakeAgent, type FakePeer } from "../testing/fake-peers.js";
import { testServerOptions } from "../testing/server-options.js";

const NS = ["open-cluster-management-agent-addon"];
const ids = parseAgentIdentifiers;

test("serviceProxyHost: Go cluster-proxy's cluster-<sha256> label cut to 56 characters", () => {
  const host = serviceProxyHost("east");
  const hex = createHash("sha256").update("east").digest("hex");
  assert.equal(host, `cluster-${hex.slice(0, 48)}.open-cluster-management.proxy`);
  assert.equal(host.split(".")[0]!.length, 56);
});

test("a granted cluster allows its name, <name>.<namespace> and its service-proxy host, nothing else", () => {
  const hosts = grantedHosts(["east"], NS);
  assert.deepEqual(
    [...hosts].sort(),
    ["east", "east.open-cluster-management-agent-addon", serviceProxyHost("east")].sort(),
  );
  for (const ok of [
    "host=east",
    "host=EAST.",
    "host=east.open-cluster-management-agent-addon",
    `host=${serviceProxyHost("east")}`,
    "host=east&host=east.open-cluster-management-agent-addon",
    "",
  ]) {
    assert.equal(checkAgentIdentifiers(ids(ok), ["east"], NS), undefined, ok);
  }
  for (const [bad, identifier] of [
    ["host=west", "host=west"],
    ["host=east&host=west", "host=west"],
    ["host=svc.east", "host=svc.east"],
    ["host=east.other-namespace", "host=east.other-namespace"],
    [`host=${serviceProxyHost("west")}`, `host=${serviceProxyHost("west")}`],
    ["host=eas", "host=eas"],
  ] as const) {
    const r = checkAgentIdentifiers(ids(bad), ["east"], NS);
    assert.equal(r?.reason, "host_not_granted", bad);
    assert.equal(r?.identifier, identifier);
    assert.ok(r?.message.includes(`"${identifier}"`) && r.message.includes('"east"'), r?.message);
    assert.match(r?.message ?? "", /--agent-identity=shared/);
  }
  // without namespaces only the name and the service-proxy host
  assert.equal(
    checkAgentIdentifiers(ids("host=east.open-cluster-management-agent-addon"), ["east"], [])?.reason,
    "host_not_granted",
  );
});

test("address and default-route identifiers are refused in certificate mode", () => {
  for (const [value, identifier] of [
    ["host=east&ipv4=10.0.0.1", "ipv4=10.0.0.1"],
    ["ipv6=fd00::1", "ipv6=fd00::1"],
    ["cidr=10.0.0.0/8", "cidr=10.0.0.0/8"],
    ["host=east&default-route=true", "default-route=true"],
  ] as const) {
    const r = checkAgentIdentifiers(ids(value), ["east"], NS);
    assert.equal(r?.reason, "address_identifier", value);
    assert.equal(r?.identifier, identifier);
    assert.ok(r?.message.includes(identifier));
  }
});

describe("verifyAgentIdentity with certificates from @cluster-proxy/pki", () => {
  let eastDer: Uint8Array;
  let twoDer: Uint8Array;
  let plainDer: Uint8Array;
  before(async () => {
    const ca = await createCertificateAuthority({ commonName: "test-ca" });
    const der = async (uris: string[]): Promise<Uint8Array> =>
      new X509Certificate((await issueCertificate(ca, { commonName: "agent", uris, usage: "client" })).certPem).raw;
    eastDer = await der([agentClusterUri("east")]);
    twoDer = await der([agentClusterUri("east"), agentClusterUri("1prod.west")]);
    plainDer = await der([]);
  });

  test("the certificate's URI SANs are the granted clusters", () => {
    assert.deepEqual(verifyAgentIdentity("certificate", ids("host=east"), eastDer, NS), { granted: ["east"] });
    assert.deepEqual(verifyAgentIdentity("certificate", ids("host=east&host=1prod.west"), twoDer, NS), {
      granted: ["east", "1prod.west"],
    });
    const r = verifyAgentIdentity("certificate", ids("host=west"), eastDer, NS);
    assert.equal(r.refusal?.reason, "host_not_granted");
    assert.match(
      r.refusal?.message ?? "",
      /"host=west" is not granted by the agent's certificate \(it grants "east"\)/,
    );
  });

  test("a certificate without cluster URIs grants nothing; shared mode grants everything", () => {
    const r = verifyAgentIdentity("certificate", ids("host=east"), plainDer, NS);
    assert.match(r.refusal?.message ?? "", /grants no cluster/);
    assert.equal(verifyAgentIdentity("certificate", ids(""), plainDer, NS).refusal, undefined);
    assert.equal(
      verifyAgentIdentity("certificate", ids("host=east"), undefined, NS).refusal?.reason,
      "host_not_granted",
    );
    assert.equal(verifyAgentIdentity("shared", ids("host=west&default-route=true"), plainDer, NS).refusal, undefined);
  });

  test("node's own parse of the peer certificate (getPeerX509Certificate) is read as it is, its DER never parsed again", () => {
    const cert = new X509Certificate(Buffer.from(twoDer));
    Object.defineProperty(cert, "raw", {
      get: (): never => {
        throw new Error("the DER was read again");
      },
    });
    assert.deepEqual(verifyAgentIdentity("certificate", ids("host=1prod.west"), cert, NS), {
      granted: ["east", "1prod.west"],
    });
  });

  test("an unreadable certificate is refused", () => {
    const r = verifyAgentIdentity("certificate", ids("host=east"), new Uint8Array([1, 2, 3]), NS);
    assert.equal(r.refusal?.reason, "unreadable_certificate");
  });
});

describe("the agent service refuses identifiers the certificate does not grant", () => {
  let pki: TestPki;
  const peers: FakePeer[] = [];
  before(async () => {
    pki = await createTestPki();
  });
  after(() => {
    for (const p of peers) p.close();
    pki.cleanup();
  });

  const options = (over: Partial<ServerOptions>): ServerOptions =>
    testServerOptions(pki, { mode: "grpc", serverId: "identity-test", ...over });

  const connect = async (server: ProxyServer, agentidentifiers: string): Promise<FakePeer> => {
    const addr = server.addresses().agent as net.AddressInfo;
    const tls = { ca: pki.ca, cert: pki.agentCert, key: pki.agentKey };
    const p = await connectFakeAgent({ host: "127.0.0.1", port: addr.port, tls }, { agentid: "a", agentidentifiers });
    peers.push(p);
    return p;
  };

  test("certificate mode (default): PERMISSION_DENIED naming the identifier and the grants, counted", async () => {
    const server = new ProxyServer(options({}));
    await server.start();
    try {
      const refused = await connect(server, "host=east&host=moon");
      const status = await refused.packets.closed();
      assert.equal(status.code, GrpcStatus.PERMISSION_DENIED);
      assert.match(status.details, /"host=moon" is not granted .*"east", "west", "north", "south"/);
      const cidr = await connect(server, "cidr=0.0.0.0/0");
      assert.equal((await cidr.packets.closed()).code, GrpcStatus.PERMISSION_DENIED);
      const ok = await connect(server, "host=east&host=west");
      await ok.call.waitForHeaders();
      assert.equal(server.backendCount(), 1);
      const text = await server.metrics.registry.metrics();
      assert.match(text, /cluster_proxy_server_agent_identity_refusals_total\{reason="host_not_granted"\} 1/);
      assert.match(text, /cluster_proxy_server_agent_identity_refusals_total\{reason="address_identifier"\} 1/);
    } finally {
      await server.close();
    }
  });

  test("shared mode accepts self-asserted identifiers", async () => {
    const server = new ProxyServer(options({ agentIdentity: "shared" }));
    await server.start();
    try {
      const p = await connect(server, "host=moon&default-route=true");
      await p.call.waitForHeaders();
      assert.equal(server.backendCount(), 1);
    } finally {
      await server.close();
    }
  });
});
