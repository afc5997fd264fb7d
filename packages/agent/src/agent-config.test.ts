import { test } from "node:test";
import assert from "node:assert/strict";
import { ConfigError, agentOptionsSchema, withDefaults, type AgentOptions } from "@cluster-proxy/api";
import { agentIdentifiersHeader, resolveAgentID, validateAgentOptions } from "./agent-config.js";
import { parseServerHandshake } from "./agent.js";

function opts(over: Partial<AgentOptions> = {}): AgentOptions {
  return { ...withDefaults(agentOptionsSchema, {}), caCert: "/ca.crt", ...over };
}

function rejects(over: Partial<AgentOptions>, flag: string): void {
  assert.throws(
    () => validateAgentOptions(opts(over)),
    (err: Error) => err instanceof ConfigError && err.message.startsWith(`--${flag}:`),
    `expected an error naming --${flag}`,
  );
}

test("defaults plus a CA are valid", () => {
  validateAgentOptions(opts());
  validateAgentOptions(opts({ clusterName: "1east", apiserverAddress: "10.96.0.1" }));
  validateAgentOptions(opts({ apiserverAddress: "[fd00::1]" }));
  validateAgentOptions(opts({ agentIdentifiers: "host=a&ipv4=1.2.3.4&default-route=true" }));
});

test("every bad option names its flag", () => {
  rejects({ caCert: "" }, "ca-cert");
  rejects({ certReloadInterval: -1 }, "cert-reload-interval");
  rejects({ agentCert: "/c.crt", agentKey: "" }, "agent-key");
  rejects({ agentCert: "", agentKey: "/k.key" }, "agent-cert");
  rejects({ agentIdentifiers: "zone=eu" }, "agent-identifiers");
  rejects({ agentIdentifiers: "host=a;host=b" }, "agent-identifiers");
  rejects({ agentIdentifiers: "default-route=maybe" }, "agent-identifiers");
  rejects({ clusterName: "bad name" }, "cluster-name");
  rejects({ clusterName: "a:443" }, "cluster-name");
  rejects({ apiserverAddress: "" }, "apiserver-address");
  rejects({ apiserverAddress: "host:notaport" }, "apiserver-address");
  rejects({ proxyServerHost: "" }, "proxy-server-host");
  rejects({ proxyServerPort: 0 }, "proxy-server-port");
  rejects({ syncInterval: 0 }, "sync-interval");
  rejects({ syncInterval: 2000, syncIntervalCap: 1000 }, "sync-interval-cap");
  rejects({ keepaliveTimeout: 0 }, "keepalive-timeout");
  rejects({ dialTimeout: 0 }, "dial-timeout");
  rejects({ agentId: "has space" }, "agent-id");
  rejects({ gatewayCaFile: "/gw-ca.crt" }, "gateway-ca-file");
  rejects({ kubeApiserverUrl: "10.96.0.1:443" }, "kube-apiserver-url");
  rejects({ kubeApiserverUrl: "https://10.96.0.1/api" }, "kube-apiserver-url");
  rejects({ kubeApiserverUrl: "https://u:p@10.96.0.1" }, "kube-apiserver-url");
  validateAgentOptions(opts({ kubeApiserverUrl: "https://[fd00::1]:6443" }));
});

test("identifiers header adds host=<cluster-name> once", () => {
  assert.equal(agentIdentifiersHeader(opts()), "");
  assert.equal(agentIdentifiersHeader(opts({ clusterName: "east" })), "host=east");
  assert.equal(agentIdentifiersHeader(opts({ clusterName: "east", agentIdentifiers: "host=sp" })), "host=sp&host=east");
  assert.equal(agentIdentifiersHeader(opts({ clusterName: "east", agentIdentifiers: "host=east" })), "host=east");
});

test("agent ID: flag, then PROXY_AGENT_ID, then a random UUID", () => {
  assert.equal(resolveAgentID(opts({ agentId: "a" }), { PROXY_AGENT_ID: "b" }), "a");
  assert.equal(resolveAgentID(opts(), { PROXY_AGENT_ID: "b" }), "b");
  assert.match(resolveAgentID(opts(), {}), /^[0-9a-f-]{36}$/);
});

test("handshake headers: exactly one serverid, an integer servercount", () => {
  assert.deepEqual(parseServerHandshake({ ":status": 200, serverid: "s1", servercount: "3" }), {
    serverID: "s1",
    serverCount: 3,
  });
  assert.throws(() => parseServerHandshake({ ":status": 200, servercount: "1" }), /serverid/);
  assert.throws(() => parseServerHandshake({ ":status": 200, serverid: "a, b", servercount: "1" }), /serverid/);
  assert.throws(() => parseServerHandshake({ ":status": 200, serverid: "s1", servercount: "x" }), /servercount/);
  assert.throws(() => parseServerHandshake({ ":status": 200, serverid: "s1" }), /servercount/);
  assert.throws(
    () => parseServerHandshake({ ":status": 200, "grpc-status": "2", "grpc-message": "bad%20agent" }),
    /refused the stream: bad agent/,
  );
});
