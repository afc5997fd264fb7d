/**
 * The agent is the last line (issue 39): requests the gateway would never send are answered 400
 * by the endpoint's request handling and nothing reaches the kube-apiserver stand-in; what the
 * gateway sends still works. Driven over plain HTTP/1.1 on loopback straight into the request
 * handling (the TLS, tunnel and framing around it are the endpoint's own tests), with raw request
 * heads so that `Connection` can name any header.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { after, before, describe, test } from "node:test";
import * as http from "@cluster-proxy/kit/http";
import { silentLogger } from "@cluster-proxy/kit";
import { GatewayProxy } from "./gateway-proxy.js";
import type { Upstream } from "./gateway-upstreams.js";

interface Seen {
  url: string;
  headers: http.IncomingHttpHeaders;
}

/**
 * Send a raw request head and read the whole answer (the server closes after it: `Connection:
 * close` is added unless `upgrade`, whose answers close anyway).
 */
async function raw(port: number, lines: string[], upgrade = false): Promise<{ status: number; text: string }> {
  const socket = net.connect(port, "127.0.0.1");
  await once(socket, "connect");
  socket.setTimeout(10_000, () => socket.destroy(new Error("no answer within 10 s")));
  // Not ended: the server would take a half-close for a caller gone away.
  socket.write(`${[...lines, ...(upgrade ? [] : ["Connection: close"])].join("\r\n")}\r\n\r\n`);
  let text = "";
  socket.setEncoding("utf8");
  for await (const chunk of socket) text += String(chunk);
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text };
}

describe("the agent serves only the gateway's identities", () => {
  let apiserver: http.Server;
  let endpoint: http.Server;
  let port = 0;
  const seen: Seen[] = [];
  const pool = new http.Agent({ keepAlive: false });

  before(async () => {
    apiserver = http.createServer((req, res) => {
      seen.push({ url: req.url ?? "", headers: req.headers });
      res.end("apiserver\n");
    });
    apiserver.listen(0, "127.0.0.1");
    await once(apiserver, "listening");
    const upstreamPort = (apiserver.address() as net.AddressInfo).port;
    const proxy = new GatewayProxy({
      resolve: (target): Promise<Upstream> =>
        Promise.resolve({
          name: "kube-apiserver stand-in",
          protocol: "http:",
          host: "127.0.0.1",
          port: upstreamPort,
          hostHeader: `127.0.0.1:${upstreamPort}`,
          agent: pool,
          ...(target.kind === "kube" && target.credential === "impersonate" ? { token: "agent-sa-token" } : {}),
        }),
      connectTimeoutMs: 5_000,
      impersonationPrefix: "cluster:hub:",
      logger: silentLogger,
    });
    endpoint = http.createServer((req, res) => proxy.handleRequest(req, res));
    endpoint.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) =>
      proxy.handleUpgrade(req, socket, head),
    );
    endpoint.listen(0, "127.0.0.1");
    await once(endpoint, "listening");
    port = (endpoint.address() as net.AddressInfo).port;
  });
  after(() => {
    endpoint.close();
    apiserver.close();
    pool.destroy();
  });

  const head = (...headers: string[]): string[] => [
    "POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings HTTP/1.1",
    "Host: gateway.cluster-proxy.invalid",
    "Content-Length: 0",
    "Cluster-Proxy-Target: kube",
    ...headers,
  ];

  test("what the gateway sends reaches the apiserver as that identity, with the agent's token", async () => {
    const before = seen.length;
    const answer = await raw(
      port,
      head(
        "Impersonate-User: cluster:hub:alice",
        "Impersonate-Group: cluster:hub:devs",
        "Impersonate-Group: system:authenticated",
      ),
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(seen.length, before + 1);
    const got = seen.at(-1)!.headers;
    assert.equal(got["impersonate-user"], "cluster:hub:alice");
    assert.equal(got["impersonate-group"], "cluster:hub:devs, system:authenticated");
    assert.equal(got.authorization, "Bearer agent-sa-token");
  });

  test("a Service gets no caller identity or forwarding header; X-Forwarded-For/-Proto are the gateway's", async () => {
    const before = seen.length;
    const answer = await raw(port, [
      "GET /index.html HTTP/1.1",
      "Host: gateway.cluster-proxy.invalid",
      "Cluster-Proxy-Target: service",
      "Cluster-Proxy-Service: http://web.apps.svc:80",
      "Cluster-Proxy-Forwarded-For: 192.0.2.7",
      "Cluster-Proxy-Forwarded-Proto: https",
      "X-Remote-User: system:admin",
      "X-Remote-Group: system:masters",
      "X-Forwarded-For: 203.0.113.66",
      "X-Forwarded-User: admin",
      "Forwarded: for=203.0.113.66",
      "X-Real-Ip: 203.0.113.66",
      "X-Auth-Request-User: admin",
      "X-Client-Ip: 203.0.113.66",
      "X-Original-Url: /admin",
      "Authorization: Bearer caller",
    ]);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(seen.length, before + 1);
    const got = seen.at(-1)!.headers;
    const claims = Object.keys(got).filter((n) =>
      /^(x-remote-|x-forwarded-|forwarded$|x-real-ip$|x-auth-request-|x-client-|x-original-|authorization$)/.test(n),
    );
    assert.deepEqual(claims.sort(), ["x-forwarded-for", "x-forwarded-proto"]);
    assert.equal(got["x-forwarded-for"], "192.0.2.7");
    assert.equal(got["x-forwarded-proto"], "https");
  });

  const refused: [string, string[]][] = [
    ["Connection: Impersonate-User", ["Connection: Impersonate-User", "Impersonate-User: cluster:hub:alice"]],
    ["an unprefixed user", ["Impersonate-User: system:admin", "Impersonate-Group: system:masters"]],
    ["an unprefixed group", ["Impersonate-User: cluster:hub:alice", "Impersonate-Group: system:masters"]],
    ["a missing Impersonate-User", ["Impersonate-Group: cluster:hub:devs"]],
    ["no identity at all", []],
    ["pass-through and impersonation", ["Cluster-Proxy-Passthrough: true", "Impersonate-User: cluster:hub:alice"]],
  ];
  for (const [what, headers] of refused) {
    test(`${what}: 400, nothing reaches the apiserver`, async () => {
      const before = seen.length;
      const answer = await raw(port, head(...headers));
      assert.equal(answer.status, 400, answer.text);
      assert.equal(seen.length, before, "nothing reached the apiserver stand-in");
    });
    test(`${what}, as an upgrade: 400, nothing reaches the apiserver`, async () => {
      const before = seen.length;
      const answer = await raw(
        port,
        [
          "GET /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1",
          "Host: gateway.cluster-proxy.invalid",
          "Upgrade: websocket",
          "Cluster-Proxy-Target: kube",
          // One Connection header: the upgrade token, and the header it names.
          ...headers.map((h) => (h.startsWith("Connection: ") ? `Connection: Upgrade, ${h.slice(12)}` : h)),
          ...(headers.some((h) => h.startsWith("Connection: ")) ? [] : ["Connection: Upgrade"]),
        ],
        true,
      );
      assert.equal(answer.status, 400, answer.text);
      assert.equal(seen.length, before, "nothing reached the apiserver stand-in");
    });
  }
});
