import assert from "node:assert/strict";
import { once } from "node:events";
import type * as net from "node:net";
import * as tls from "node:tls";
import { after, before, describe, test } from "node:test";
import type { ServerOptions } from "@cluster-proxy/api";
import { GrpcStatus } from "@cluster-proxy/tunnel";
import { ProxyServer } from "../proxy-server.js";
import { connectFakeAgent, type FakePeer } from "../testing/fake-peers.js";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { ManualClock } from "@cluster-proxy/kit/testing";
import { testServerOptions } from "../testing/server-options.js";
import { AgentAuthError, RateLimiter, authenticateAgentToken, type TokenReviewFn } from "./token-review.js";

/** Whether `p` has settled, after the continuations queued so far ran. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return done;
}

const SA = "system:serviceaccount:kube-system:konnectivity-agent";
const review: TokenReviewFn = (token, audience) => {
  if (audience !== "system:konnectivity-server")
    return Promise.reject(new Error("lookup failed: token audiences mismatch"));
  if (token === "good") return Promise.resolve(SA);
  if (token === "other-sa") return Promise.resolve("system:serviceaccount:kube-system:default");
  if (token === "other-ns") return Promise.resolve("system:serviceaccount:default:konnectivity-agent");
  if (token === "user") return Promise.resolve("system:admin:x:y");
  return Promise.reject(new Error("lookup failed: service account jwt not valid"));
};
const auth = {
  agentNamespace: "kube-system",
  agentServiceAccount: "konnectivity-agent",
  authenticationAudience: "system:konnectivity-server",
  review,
};

describe("agent ServiceAccount token check (Go's rules and texts)", () => {
  test("a valid token of the expected ServiceAccount passes", async () => {
    assert.equal(await authenticateAgentToken(["Bearer good"], auth), SA);
  });

  test("missing, doubled, unprefixed and foreign tokens are refused with Go's messages", async () => {
    const cases: [string[], RegExp][] = [
      [[], /^Authentication context was not found in metadata$/],
      [["Bearer good", "Bearer good"], /^too many \(2\) tokens are received$/],
      [["good"], /^received token does not have "Bearer " prefix$/],
      [["Bearer nope"], /^Failed to validate authentication token, err:lookup failed: service account jwt not valid$/],
      [["Bearer other-sa"], /incoming request from "default" service account\. Expected "konnectivity-agent"/],
      [["Bearer other-ns"], /incoming request from "default" namespace\. Expected "kube-system"/],
      [["Bearer user"], /username returned is not a service account/],
    ];
    for (const [values, message] of cases) {
      await assert.rejects(authenticateAgentToken(values, auth), (err: Error) => {
        assert.ok(err instanceof AgentAuthError);
        assert.match(err.message, message);
        return true;
      });
    }
  });

  test("the rate limiter spaces requests past the burst at qps", async () => {
    const clock = new ManualClock();
    const limiter = new RateLimiter(20, 2, clock);
    await Promise.all([limiter.take(), limiter.take()]);
    const third = limiter.take();
    assert.equal(await settled(third), false, "past the burst it waits");
    clock.advance(49);
    assert.equal(await settled(third), false, "not before 1/qps on the injected clock");
    clock.advance(1);
    assert.equal(await settled(third), true, "at 1/qps");
    const fourth = limiter.take();
    assert.equal(await settled(fourth), false, "it waits its turn");
    clock.advance(49);
    assert.equal(await settled(fourth), false);
    clock.advance(1);
    assert.equal(await settled(fourth), true, "the next one 1/qps later");
  });
});

/** The in-process test server, authenticating agents by ServiceAccount token instead of a client CA. */
function serverOptions(pki: TestPki, overrides: Partial<ServerOptions>): ServerOptions {
  return testServerOptions(pki, {
    mode: "grpc",
    serverCaCert: pki.paths.ca.cert,
    clusterCaCert: "",
    proxyStrategies: ["default"],
    serverCount: 1,
    serverId: "token-server",
    backendDialTimeout: 0,
    agentNamespace: "kube-system",
    agentServiceAccount: "konnectivity-agent",
    authenticationAudience: "system:konnectivity-server",
    ...overrides,
  });
}

describe("ProxyServer with ServiceAccount token authentication", () => {
  let pki: TestPki;
  let server: ProxyServer;
  let agentPort: number;
  const peers: FakePeer[] = [];

  before(async () => {
    pki = await createTestPki();
    server = new ProxyServer(serverOptions(pki, {}), { tokenReview: review });
    await server.start();
    agentPort = (server.addresses().agent as net.AddressInfo).port;
  });
  after(async () => {
    for (const p of peers) p.close();
    await server.close();
    pki.cleanup();
  });

  const agent = async (authorization?: string): Promise<FakePeer> => {
    // No client certificate: the agent port asks for none under token authentication.
    const p = await connectFakeAgent(
      { host: "127.0.0.1", port: agentPort, tls: { ca: pki.ca } },
      { agentid: `agent-${peers.length}`, agentidentifiers: "", ...(authorization ? { authorization } : {}) },
    );
    peers.push(p);
    return p;
  };

  test("an agent with a good token and no certificate is accepted", async () => {
    const a = await agent("Bearer good");
    const headers = await a.call.waitForHeaders();
    assert.equal(headers["serverid"], "token-server");
    assert.equal(server.backendCount(), 1);
    assert.ok(server.ready());
  });

  test("an agent without a token, or with another ServiceAccount's, gets UNAUTHENTICATED and Go's text", async () => {
    const none = await agent();
    const s1 = await none.packets.closed();
    assert.equal(s1.code, GrpcStatus.UNAUTHENTICATED);
    assert.equal(s1.details, "Authentication context was not found in metadata");
    const other = await agent("Bearer other-sa");
    const s2 = await other.packets.closed();
    assert.equal(s2.code, GrpcStatus.UNAUTHENTICATED);
    assert.match(s2.details, /Expected "konnectivity-agent"/);
    assert.equal(server.backendCount(), 1);
    assert.match(await server.metrics.registry.metrics(), /^cluster_proxy_server_agent_token_auth_failures_total 2$/m);
  });

  test("validation: all three flags or none, and no --cluster-ca-cert next to them", () => {
    assert.throws(
      () => serverOptions(pki, { agentServiceAccount: "" }),
      /^ConfigError: --agent-service-account: cannot be empty/,
    );
    assert.throws(
      () => serverOptions(pki, { clusterCaCert: pki.paths.ca.cert }),
      /^ConfigError: --cluster-ca-cert: cannot be used/,
    );
    assert.throws(
      () => serverOptions(pki, { agentNamespace: "", agentServiceAccount: "", authenticationAudience: "" }),
      /^ConfigError: --cluster-ca-cert: required .* unless agents authenticate with ServiceAccount tokens/,
    );
  });
});

describe("--tls-min-version and --cipher-suites on the TLS ports", () => {
  let pki: TestPki;
  before(async () => {
    pki = await createTestPki();
  });
  after(() => pki.cleanup());

  async function handshake(port: number, options: tls.ConnectionOptions): Promise<string> {
    const s = tls.connect({ host: "127.0.0.1", port, ca: pki.ca, ALPNProtocols: ["h2"], ...options });
    try {
      await Promise.race([once(s, "secureConnect"), once(s, "error").then(([e]) => Promise.reject(e as Error))]);
      return `${s.getProtocol()} ${s.getCipher().name}`;
    } finally {
      s.destroy();
    }
  }

  test("VersionTLS13 refuses a TLS 1.2 client; a cipher list refuses a client without those suites", async () => {
    const tls13 = new ProxyServer(serverOptions(pki, { tlsMinVersion: "VersionTLS13" }), { tokenReview: review });
    await tls13.start();
    try {
      const port = (tls13.addresses().agent as net.AddressInfo).port;
      assert.match(await handshake(port, {}), /^TLSv1\.3 /);
      await assert.rejects(handshake(port, { maxVersion: "TLSv1.2" }));
    } finally {
      await tls13.close();
    }
    const suites = new ProxyServer(
      serverOptions(pki, {
        cipherSuites: ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
      }),
      { tokenReview: review },
    );
    await suites.start();
    try {
      const port = (suites.addresses().agent as net.AddressInfo).port;
      assert.match(await handshake(port, { maxVersion: "TLSv1.2" }), /^TLSv1\.2 ECDHE-(ECDSA|RSA)-AES256-GCM-SHA384$/);
      await assert.rejects(
        handshake(port, {
          maxVersion: "TLSv1.2",
          ciphers: "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
        }),
      );
      assert.match(await handshake(port, {}), /^TLSv1\.3 /, "TLS 1.3 keeps its default suites, as in Go");
    } finally {
      await suites.close();
    }
  });
});
