import assert from "node:assert/strict";
import { test } from "node:test";
import { AGENT_CONNECTION_MESSAGE_MAX } from "@cluster-proxy/api";
import { connectionCondition, safeErrorText } from "./connection-report.js";

test("the condition: True when connected to every server, else False with the agent's own last error", () => {
  assert.deepEqual(connectionCondition({ agent: "agent-a", connected: 3, known: 3, lastError: "old" }), {
    type: "ProxyAgentConnected",
    status: "True",
    reason: "Connected",
    message: "agent-a: connected to 3 of 3 proxy-servers",
  });
  const down = connectionCondition({
    agent: "agent-a",
    connected: 0,
    known: 1,
    lastError: "cannot connect to proxy-entrypoint.example:8091: getaddrinfo ENOTFOUND proxy-entrypoint.example",
  });
  assert.equal(down.status, "False");
  assert.equal(down.reason, "NotConnected");
  assert.equal(
    down.message,
    "agent-a: connected to 0 of 1 proxy-server; last error: cannot connect to proxy-entrypoint.example:8091: getaddrinfo ENOTFOUND proxy-entrypoint.example",
  );
  const partial = connectionCondition({ agent: "agent-a", connected: 1, known: 3, lastError: "x" });
  assert.equal(partial.status, "False");
  assert.equal(partial.reason, "PartiallyConnected");
  assert.match(partial.message, /^agent-a: connected to 1 of 3 proxy-servers; last error: x$/);
});

test("through the hub kube-apiserver (PortForward) the message says so, with the apiserver's refusal explained", () => {
  const refused = connectionCondition({
    agent: "agent-a",
    connected: 1,
    known: 2,
    path: "through the hub kube-apiserver (entrypoint PortForward)",
    lastError:
      "hub kube-apiserver answered 403 to the tunnel upgrade through pods/p-1/proxy: refused by RBAC (the agent needs get on pods/proxy in namespace ns; ...)",
  });
  assert.equal(refused.status, "False");
  assert.match(
    refused.message,
    /^agent-a: connected to 1 of 2 proxy-servers through the hub kube-apiserver \(entrypoint PortForward\); last error: hub kube-apiserver answered 403 .* refused by RBAC/,
  );
});

test("the message leaves the cluster: no proxy credentials, no tokens, no control characters, bounded", () => {
  assert.equal(
    safeErrorText(
      "proxy http://alice:s3cret@proxy.corp:3128 refused: 407\r\nProxy-Authorization: Basic YWxpY2U6czNjcmV0",
    ),
    "proxy http://***@proxy.corp:3128 refused: 407 Proxy-Authorization: Basic ***",
  );
  assert.equal(
    safeErrorText("Authorization: Bearer eyJhbGciOi.eyJzdWIi.sig failed"),
    "Authorization: Bearer *** failed",
  );
  const long = connectionCondition({ agent: "a".repeat(63), connected: 0, known: 1, lastError: "e".repeat(5000) });
  assert.equal(long.message.length, AGENT_CONNECTION_MESSAGE_MAX);
  assert.ok(long.message.endsWith("…"));
});
