import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { silentLogger, type Logger } from "@cluster-proxy/kit";
import { freePort, waitUntil } from "@cluster-proxy/tunnel/testing";
import { ProxyAgent } from "./agent.js";
import { validateAgentOptions } from "./agent-config.js";
import type { ConnectionCondition } from "./connect/connection-report.js";
import { FakeProxyServer } from "./testing/fake-proxy-server.js";

let pki: TestPki;
before(async () => {
  pki = await createTestPki();
});
after(() => pki.cleanup());

test("--status-deployment: the agent writes why it cannot connect, once, then that it is connected", async () => {
  const port = await freePort();
  const written: ConnectionCondition[] = [];
  let failures = 0;
  const logger: Logger = {
    ...silentLogger,
    warn: (_obj, msg) => {
      if (msg === "cannot connect to proxy server") failures++;
    },
    child: () => logger,
  };
  const agent = new ProxyAgent(
    validateAgentOptions({
      proxyServerHost: "127.0.0.1",
      proxyServerPort: port,
      caCert: pki.paths.ca.cert,
      agentCert: pki.paths.agent.cert,
      agentKey: pki.paths.agent.key,
      agentId: "cluster-proxy-proxy-agent-7d9f-x2x4q",
      agentIdentifiers: "host=east",
      healthServerPort: 0,
      adminServerPort: 0,
      syncInterval: 50,
      syncIntervalCap: 100,
      statusDeployment: "agents/cluster-proxy-proxy-agent",
      logLevel: "silent",
    }),
    {
      logger,
      sendStatus: (body) => {
        written.push((JSON.parse(body) as { status: { conditions: ConnectionCondition[] } }).status.conditions[0]!);
        return Promise.resolve();
      },
    },
  );
  const server = new FakeProxyServer(pki, { serverID: "server-1", serverCount: 1 });
  try {
    await agent.start();
    // Nothing listens yet: the reconnect loop fails every ~100 ms, always the same way.
    await waitUntil("the refusal written", () => written.length > 0, { timeoutMs: 20_000 });
    assert.equal(written[0]!.status, "False");
    assert.equal(written[0]!.reason, "NotConnected");
    assert.match(
      written[0]!.message,
      new RegExp(
        `^cluster-proxy-proxy-agent-7d9f-x2x4q: connected to 0 of 1 proxy-server; last error: cannot connect to 127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`,
      ),
    );
    const seen = failures;
    await waitUntil("five more failed attempts", () => failures >= seen + 5, { timeoutMs: 20_000 });
    assert.equal(written.length, 1, `the same failure is written once: ${JSON.stringify(written)}`);
    await server.listen(port);
    await waitUntil("connected written", () => written.at(-1)?.status === "True", { timeoutMs: 20_000 });
    const { lastTransitionTime, lastUpdateTime, ...connected } = written.at(-1)! as ConnectionCondition & {
      lastTransitionTime?: string;
      lastUpdateTime?: string;
    };
    assert.ok(lastTransitionTime && lastUpdateTime);
    assert.deepEqual(connected, {
      type: "ProxyAgentConnected",
      status: "True",
      reason: "Connected",
      message: "cluster-proxy-proxy-agent-7d9f-x2x4q: connected to 1 of 1 proxy-server",
    });
  } finally {
    await agent.close();
    await server.close();
  }
});
