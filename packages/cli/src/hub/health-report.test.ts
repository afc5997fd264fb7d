import assert from "node:assert/strict";
import { test } from "node:test";
import type { healthDocument } from "./health-report.js";
import {
  addonReasons,
  alignColumns,
  expiryFromRotatedMessage,
  formatHealth,
  formatLatency,
  healthExitCode,
  isHealthy,
  type ClusterHealth,
} from "./health-report.js";

const healthy: ClusterHealth = {
  cluster: "mc1",
  installed: true,
  available: "True",
  probedHealth: true,
  latencyMs: 12.4,
  proxyServers: { connected: 2, total: 2 },
  agentCertificateExpiry: "2027-11-24T01:00:00Z",
  gatewayEndpoint: true,
  via: "apiserver",
  reason: "",
};
const cutOff: ClusterHealth = {
  cluster: "mc2-long-name",
  installed: true,
  available: "False",
  probedHealth: false,
  reason: "probe through the tunnel: no answer within 10s",
};
const notInstalled: ClusterHealth = {
  cluster: "edge",
  installed: false,
  available: "Unknown",
  probedHealth: false,
  reason: "ManagedClusterAddOn cluster-proxy not found in namespace edge",
};

test("the table keeps clusteradm's first five columns, in its order and spelling, then REASON", async () => {
  const text = await formatHealth([healthy, cutOff, notInstalled], "table");
  assert.equal(
    text,
    [
      "CLUSTER NAME    INSTALLED   AVAILABLE   PROBED HEALTH   LATENCY   REASON",
      "mc1             True        True        True            12ms      -",
      "mc2-long-name   True        False       False           -         probe through the tunnel: no answer within 10s",
      "edge            False       Unknown     False           -         ManagedClusterAddOn cluster-proxy not found in namespace edge",
      "",
    ].join("\n"),
  );
  // A script that splits on runs of 2+ spaces gets clusteradm's five fields first.
  const [head] = text.split("\n");
  assert.deepEqual(head!.split(/\s{2,}/).slice(0, 5), [
    "CLUSTER NAME",
    "INSTALLED",
    "AVAILABLE",
    "PROBED HEALTH",
    "LATENCY",
  ]);
});

test("-o wide adds the proxy-servers the tunnel works through, the agent certificate's expiry, the gateway endpoint and the way to the proxy-servers", async () => {
  const gatewayDown: ClusterHealth = {
    ...healthy,
    cluster: "mc3",
    gatewayEndpoint: false,
    via: "direct",
    reason: "gateway endpoint: x",
  };
  const lines = (await formatHealth([healthy, cutOff, gatewayDown], "wide")).split("\n");
  assert.match(lines[0]!, /LATENCY\s+PROXY-SERVERS\s+AGENT CERT EXPIRY\s+GATEWAY\s+VIA\s+REASON$/);
  assert.match(lines[1]!, /12ms\s+2\/2\s+2027-11-24T01:00:00Z\s+True\s+apiserver\s+-$/);
  assert.match(lines[2]!, /-\s+-\s+-\s+-\s+-\s+probe through/, "unknown shows -");
  assert.match(lines[3]!, /2027-11-24T01:00:00Z\s+False\s+direct\s+gateway endpoint: x$/);
  assert.equal(isHealthy(gatewayDown), true, "the gateway endpoint does not count towards healthy");
});

test("JSON and YAML carry every field; unknown values are null", async () => {
  const doc = JSON.parse(await formatHealth([healthy, cutOff], "json")) as ReturnType<typeof healthDocument>;
  assert.equal(doc.kind, "ClusterProxyHealthList");
  assert.deepEqual(doc.items[0], {
    cluster: "mc1",
    installed: true,
    available: "True",
    probedHealth: true,
    healthy: true,
    latencyMs: 12,
    proxyServers: { connected: 2, total: 2 },
    agentCertificateExpiry: "2027-11-24T01:00:00Z",
    gatewayEndpoint: true,
    via: "apiserver",
    reason: "",
  });
  assert.deepEqual(doc.items[1], {
    cluster: "mc2-long-name",
    installed: true,
    available: "False",
    probedHealth: false,
    healthy: false,
    latencyMs: null,
    proxyServers: null,
    agentCertificateExpiry: null,
    gatewayEndpoint: null,
    via: null,
    reason: "probe through the tunnel: no answer within 10s",
  });
  const yaml = await formatHealth([healthy], "yaml");
  assert.match(yaml, /^kind: ClusterProxyHealthList$/m);
  assert.match(yaml, /^\s+- cluster: mc1$/m);
  assert.match(yaml, /^\s+probedHealth: true$/m);
});

test("healthy means installed, Available and probed", () => {
  assert.equal(isHealthy(healthy), true);
  assert.equal(isHealthy({ ...healthy, available: "Unknown" }), false);
  assert.equal(isHealthy({ ...healthy, probedHealth: false }), false);
  assert.equal(isHealthy(notInstalled), false);
});

test("latency text and column alignment", () => {
  assert.equal(formatLatency(undefined), "-");
  assert.equal(formatLatency(0.4), "0ms");
  assert.equal(formatLatency(1530), "1.5s");
  assert.equal(
    alignColumns([
      ["A", "BB"],
      ["CCC", "D"],
    ]),
    "A     BB\nCCC   D\n",
  );
});

test("a cluster left without the addon is listed but fails health only when named with --cluster", () => {
  assert.equal(healthExitCode([healthy, notInstalled]), 0);
  assert.equal(healthExitCode([healthy, notInstalled], ["edge"]), 1);
  assert.equal(healthExitCode([healthy, notInstalled], ["mc1"]), 0);
  assert.equal(healthExitCode([healthy, cutOff, notInstalled]), 1, "an installed cluster that is not healthy fails");
  assert.equal(healthExitCode([]), 0);
});

test("REASON names OCM's ClusterCertificateRotated=False in its words, once, even while Available is True", () => {
  const rotated = {
    type: "ClusterCertificateRotated",
    status: "False",
    reason: "ClientCertificateUpdateFailed",
    message: "Stop creating csr since there are too many csr created already on hub",
  };
  const ocm =
    "ClusterCertificateRotated=False (ClientCertificateUpdateFailed): Stop creating csr since there are too many csr created already on hub";
  // The manager's Available already carries it: said once.
  const wedged = {
    type: "Available",
    status: "False",
    reason: "ProxyAgentUnavailable",
    message: `tunnel works through 0 of 3 proxy-servers; the agent's certificate is not being issued: ${ocm}`,
  };
  assert.deepEqual(addonReasons([wedged, rotated]), [`Available=False (ProxyAgentUnavailable): ${wedged.message}`]);
  // An older manager (or none running): OCM's condition alone.
  const bare = { ...wedged, message: "tunnel works through 0 of 3 proxy-servers" };
  assert.deepEqual(addonReasons([bare, rotated]), [
    "Available=False (ProxyAgentUnavailable): tunnel works through 0 of 3 proxy-servers",
    ocm,
  ]);
  // Available True (an agent still on its earlier certificate): the rotation problem still shows.
  assert.deepEqual(addonReasons([{ ...wedged, status: "True" }, rotated]), [ocm]);
  assert.deepEqual(
    addonReasons([
      { ...wedged, status: "True" },
      { ...rotated, status: "True" },
    ]),
    [],
  );
  assert.deepEqual(addonReasons(undefined), ["no Available condition yet"]);
});

test("the agent certificate's expiry is read from OCM's ClusterCertificateRotated message once its CSR is gone", () => {
  assert.equal(
    expiryFromRotatedMessage(
      "client certificate rotated starting from 2026-05-01 10:00:00 +0000 UTC to 2026-10-28 10:00:00 +0000 UTC",
    ),
    "2026-10-28T10:00:00Z",
  );
  assert.equal(
    expiryFromRotatedMessage(
      "client certificate rotated starting from 2026-05-01 12:00:00 +0200 CEST to 2026-10-28 12:30:00 +0200 CEST",
    ),
    "2026-10-28T10:30:00Z",
  );
  assert.equal(expiryFromRotatedMessage("Failed to rotated client certificate boom"), undefined);
  assert.equal(expiryFromRotatedMessage(undefined), undefined);
});
