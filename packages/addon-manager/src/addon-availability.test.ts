import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { TunnelHealthReason, parseTunnelHealth, type ReplicaProbe } from "@cluster-proxy/api";
import { agentFeedback, availability, availableCondition, type AvailabilityInput } from "./addon-availability.js";

const ok = (server: string): ReplicaProbe => ({ server, address: `10.0.0.${server.at(-1)}`, ok: true, latencyMs: 2 });
const failed = (server: string, error = "503 Service Unavailable: no agent available"): ReplicaProbe => ({
  server,
  address: `10.0.0.${server.at(-1)}`,
  ok: false,
  error,
});
const base: Omit<AvailabilityInput, "picture"> = {
  cluster: "mc1",
  probing: true,
  configuration: { name: "cluster-proxy", serverNamespace: "open-cluster-management-addon", agentReplicas: 3 },
};
const agent = agentFeedback([
  { name: "ReadyReplicas", fieldValue: { type: "Integer", integer: 0 } },
  { name: "Replicas", fieldValue: { type: "Integer", integer: 3 } },
  { name: "AgentConnected", fieldValue: { type: "String", string: "False" } },
  {
    name: "AgentConnectionMessage",
    fieldValue: {
      type: "String",
      string:
        "cluster-proxy-proxy-agent-5c-abcde: connected to 0 of 1 proxy-server; last error: cannot connect to proxy-entrypoint.example:8091: getaddrinfo ENOTFOUND proxy-entrypoint.example",
    },
  },
]);

describe("Available", () => {
  test("stays True while the tunnel works through at least one replica: scaling shows as partial coverage", () => {
    // Scaling 1 -> 3: the new replicas have no tunnel yet, then all three do.
    const pictures = [
      [ok("s1")],
      [ok("s1"), failed("s2"), failed("s3")],
      [ok("s1"), ok("s2"), failed("s3")],
      [ok("s1"), ok("s2"), ok("s3")],
    ];
    const conditions = pictures.map((probes) =>
      availableCondition({ ...base, picture: { probes }, ...(agent ? { agent } : {}) }),
    );
    assert.deepEqual(
      conditions.map((c) => c.status),
      ["True", "True", "True", "True"],
    );
    assert.ok(conditions.every((c) => c.reason === TunnelHealthReason.available));
    assert.deepEqual(
      conditions.map((c) => parseTunnelHealth(c.message)),
      [
        { reachable: 1, servers: 1 },
        { reachable: 1, servers: 3 },
        { reachable: 2, servers: 3 },
        { reachable: 3, servers: 3 },
      ],
    );
    assert.equal(
      conditions[1]!.message,
      "tunnel works through 1 of 3 proxy-servers (s1); s2 (10.0.0.2): 503 Service Unavailable: no agent available; s3 (10.0.0.3): 503 Service Unavailable: no agent available",
    );
  });

  test("False when no replica has a tunnel, saying why in the agent's own words", () => {
    const c = availableCondition({
      ...base,
      picture: { probes: [failed("s1"), failed("s2")] },
      ...(agent ? { agent } : {}),
    });
    assert.equal(c.status, "False");
    assert.equal(c.reason, TunnelHealthReason.unavailable);
    assert.deepEqual(parseTunnelHealth(c.message), { reachable: 0, servers: 2 });
    assert.match(
      c.message,
      /; agent Deployment in mc1: 0 of 3 ready; agents report: cluster-proxy-proxy-agent-5c-abcde: connected to 0 of 1 proxy-server; last error: cannot connect to proxy-entrypoint\.example:8091: getaddrinfo ENOTFOUND proxy-entrypoint\.example$/,
    );
    // Without anything from the agents (an older work agent, nothing written yet): the probes alone.
    const bare = availableCondition({ ...base, picture: { probes: [failed("s1")] } });
    assert.equal(
      bare.message,
      "tunnel works through 0 of 1 proxy-server; s1 (10.0.0.1): 503 Service Unavailable: no agent available",
    );
  });

  test("no replica, not probed yet, probing disabled", () => {
    const none = availableCondition({ ...base, picture: { probes: [] }, ...(agent ? { agent } : {}) });
    assert.equal(none.status, "False");
    assert.equal(none.reason, TunnelHealthReason.noServer);
    assert.match(
      none.message,
      /^no proxy-server replica of cluster-proxy is ready in namespace open-cluster-management-addon; agent Deployment/,
    );
    assert.deepEqual(
      [
        availableCondition({ ...base, picture: undefined }),
        availableCondition({ ...base, picture: { error: "no CA" } }),
        availableCondition({ ...base, probing: false, picture: undefined }),
      ].map((c) => [c.status, c.reason, c.message]),
      [
        ["Unknown", "NoProbeResult", "the tunnel to mc1 has not been probed yet"],
        ["Unknown", "NoProbeResult", "the tunnel to mc1 has not been probed yet: no CA"],
        ["Unknown", "NoProbeResult", "tunnel probing is disabled (--tunnel-probe-interval=0)"],
      ],
    );
  });

  test("agentFeedback reads the well-known and the agents' values, nothing when there are none", () => {
    assert.equal(agentFeedback(undefined), undefined);
    assert.equal(agentFeedback([]), undefined);
    assert.deepEqual(agentFeedback([{ name: "ReadyReplicas", fieldValue: { type: "Integer", integer: 2 } }]), {
      readyReplicas: 2,
    });
    assert.equal(agent?.connected, "False");
  });

  test("the proxy-servers being replaced (scaling rolls them) keep Available True for a grace time; a cut-off cluster does not", () => {
    const lastPass = { at: 1_000, replicas: ["old1"] };
    // The old replica is terminating (not probed); the new ones have no tunnel yet.
    const rolling = { probes: [failed("new1"), failed("new2"), failed("new3")], lastPass };
    const held = availability({ ...base, picture: rolling, now: 6_000, changeGraceMs: 30_000 });
    assert.equal(held.condition.status, "True");
    assert.equal(held.condition.reason, TunnelHealthReason.changing);
    assert.deepEqual(parseTunnelHealth(held.condition.message), { reachable: 0, servers: 3 });
    assert.match(held.condition.message, /being replaced: the tunnel worked through old1 moments ago/);
    assert.equal(held.recheckAfterMs, 25_100, "looked at again when the grace ends");
    // The grace is over: what the probes say.
    const over = availability({ ...base, picture: rolling, now: 31_000, changeGraceMs: 30_000 });
    assert.equal(over.condition.status, "False");
    assert.equal(over.recheckAfterMs, undefined);
    // The same replicas as when it last worked, all failing: the tunnel broke, False at once.
    const cut = availability({ ...base, picture: { probes: [failed("old1")], lastPass }, now: 2_000 });
    assert.equal(cut.condition.status, "False");
    assert.equal(cut.condition.reason, TunnelHealthReason.unavailable);
    // One replica passes: plain True, nothing held.
    const partial = availability({ ...base, picture: { probes: [ok("new1"), failed("new2")], lastPass }, now: 2_000 });
    assert.deepEqual(
      [partial.condition.status, partial.condition.reason, partial.recheckAfterMs],
      ["True", TunnelHealthReason.available, undefined],
    );
  });

  test("when OCM stops issuing the agent's certificate, Available says so in OCM's words, tunnel working or not", () => {
    const certificate = {
      rotated: {
        status: "False",
        reason: "ClientCertificateUpdateFailed",
        message: "Stop creating csr since there are too many csr created already on hub",
      },
      csrs: 10,
      csrLimit: 10,
      agentSecret: "cluster-proxy-open-cluster-management.io-proxy-agent-signer-client-cert",
    };
    const wedged = availableCondition({ ...base, picture: { probes: [failed("s1"), failed("s2")] }, certificate });
    assert.equal(wedged.status, "False");
    assert.equal(wedged.reason, TunnelHealthReason.certificateNotIssued);
    assert.match(
      wedged.message,
      /; agent pods without Secret cluster-proxy-open-cluster-management\.io-proxy-agent-signer-client-cert cannot start$/,
    );
    assert.deepEqual(parseTunnelHealth(wedged.message), { reachable: 0, servers: 2 });
    assert.match(
      wedged.message,
      /; the agent's certificate is not being issued: ClusterCertificateRotated=False \(ClientCertificateUpdateFailed\): Stop creating csr since there are too many csr created already on hub \(10 certificate requests of the addon for mc1 on the hub; OCM's registration agent stops requesting at 10\); delete them \(kubectl delete csr -l open-cluster-management\.io\/cluster-name=mc1,open-cluster-management\.io\/addon-name=cluster-proxy\)/,
    );
    // No replica at all, or the replicas being replaced: the note completes those messages too.
    assert.match(
      availableCondition({ ...base, picture: { probes: [] }, certificate }).message,
      /^no proxy-server replica .*; the agent's certificate is not being issued: ClusterCertificateRotated=False/,
    );
    const held = availability({
      ...base,
      picture: { probes: [failed("new1")], lastPass: { at: 1_000, replicas: ["old1"] } },
      now: 2_000,
      certificate,
    });
    assert.match(held.condition.message, /moments ago.*; the agent's certificate is not being issued/);
    // The tunnel still works (an agent with its earlier certificate): True, and the note says rotation stopped.
    const working = availableCondition({ ...base, picture: { probes: [ok("s1")] }, certificate });
    assert.equal(working.status, "True");
    assert.equal(working.reason, TunnelHealthReason.available);
    assert.doesNotMatch(working.message, /cannot start/);
    assert.match(working.message, /^tunnel works through 1 of 1 proxy-server \(s1\); the agent's certificate is not/);
    // Another failure: OCM's reason and message, no advice about the count.
    const other = availableCondition({
      ...base,
      picture: { probes: [failed("s1")] },
      certificate: {
        ...certificate,
        rotated: { status: "False", reason: "ClientCertificateUpdateFailed", message: "Failed to create CSR boom" },
        csrs: 1,
      },
    });
    assert.match(
      other.message,
      /ClusterCertificateRotated=False \(ClientCertificateUpdateFailed\): Failed to create CSR boom \(1 certificate request of/,
    );
    assert.doesNotMatch(other.message, /kubectl delete csr/);
  });

  test("while no certificate was issued yet, a broken tunnel says the agent pods wait for their Secret; a rotated one adds nothing", () => {
    const pending = { csrs: 1, csrLimit: 10, agentSecret: "agent-cert" };
    const waiting = availableCondition({ ...base, picture: { probes: [failed("s1")] }, certificate: pending });
    assert.equal(waiting.reason, TunnelHealthReason.certificatePending);
    // An agent that runs (it reports, or is ready) has its certificate: its own error is the cause.
    for (const agent of [
      { readyReplicas: 0, message: "a: connected to 0 of 1 proxy-server; last error: x" },
      { readyReplicas: 1 },
    ])
      assert.equal(
        availableCondition({ ...base, picture: { probes: [failed("s1")] }, certificate: pending, agent }).reason,
        TunnelHealthReason.unavailable,
      );
    assert.match(
      waiting.message,
      /; no certificate issued to the agent yet \(OCM's registration agent has not reported ClusterCertificateRotated\): its pods cannot start without Secret agent-cert \(1 certificate request/,
    );
    // The tunnel works: nothing to say.
    assert.equal(
      availableCondition({ ...base, picture: { probes: [ok("s1")] }, certificate: pending }).message,
      "tunnel works through 1 of 1 proxy-server (s1)",
    );
    const rotated = {
      ...pending,
      rotated: { status: "True", reason: "ClientCertificateUpdated", message: "client certificate rotated" },
    };
    const broken = availableCondition({ ...base, picture: { probes: [failed("s1")] }, certificate: rotated });
    assert.equal(
      broken.message,
      "tunnel works through 0 of 1 proxy-server; s1 (10.0.0.1): 503 Service Unavailable: no agent available",
    );
    assert.equal(broken.reason, TunnelHealthReason.unavailable);
  });
});
