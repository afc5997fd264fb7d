/**
 * A request Node refuses to build (it throws at once from `http.request`, inside the promise
 * callback that runs once the upstream is resolved) fails that one request with 502: it must not
 * become an unhandled rejection, which ends the agent. Driven over plain HTTP/1.1 on loopback
 * straight into the request handling, with an upstream whose `Host` value Node refuses to write.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { after, before, describe, test } from "node:test";
import * as http from "@cluster-proxy/kit/http";
import { silentLogger } from "@cluster-proxy/kit";
import { H2Upstream } from "./gateway-h2-upstream.js";
import { GatewayProxy } from "./gateway-proxy.js";
import type { Upstream } from "./gateway-upstreams.js";

/** An HTTP/2 upstream whose origin picked HTTP/1.1: every request goes over HTTP/1.1. */
class Http1OnlyUpstream extends H2Upstream {
  override open(): Promise<undefined> {
    return Promise.resolve(undefined);
  }
}

/** Send a raw request head and read the whole answer (bounded). */
async function raw(port: number, lines: string[]): Promise<{ status: number; text: string }> {
  const socket = net.connect(port, "127.0.0.1");
  await once(socket, "connect");
  socket.setTimeout(10_000, () => socket.destroy(new Error("no answer within 10 s")));
  socket.write(`${lines.join("\r\n")}\r\n\r\n`);
  let text = "";
  socket.setEncoding("utf8");
  for await (const chunk of socket) text += String(chunk);
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text };
}

describe("a request Node refuses to build upstream", () => {
  let apiserver: http.Server;
  let port = 0;
  let reached = 0;
  const endpoints: http.Server[] = [];
  const rejections: unknown[] = [];
  const onRejection = (reason: unknown): void => void rejections.push(reason);
  const pool = new http.Agent({ keepAlive: false });

  /** An endpoint whose upstream carries `hostHeader` (and `h2`, when given). */
  async function endpoint(hostHeader: string, h2?: H2Upstream): Promise<number> {
    const proxy = new GatewayProxy({
      resolve: (): Promise<Upstream> =>
        Promise.resolve({
          name: "kube-apiserver stand-in",
          protocol: "http:",
          host: "127.0.0.1",
          port,
          hostHeader,
          agent: pool,
          token: "agent-sa-token",
          ...(h2 ? { h2 } : {}),
        }),
      connectTimeoutMs: 5_000,
      impersonationPrefix: "cluster:hub:",
      logger: silentLogger,
    });
    const server = http.createServer((req, res) => proxy.handleRequest(req, res));
    server.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) =>
      proxy.handleUpgrade(req, socket, head),
    );
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    endpoints.push(server);
    return (server.address() as net.AddressInfo).port;
  }

  const kubeRequest = [
    "GET /api/v1/namespaces HTTP/1.1",
    "Host: gateway.cluster-proxy.invalid",
    "Cluster-Proxy-Target: kube",
    "Impersonate-User: cluster:hub:alice",
  ];

  before(async () => {
    process.on("unhandledRejection", onRejection);
    apiserver = http.createServer((_req, res) => {
      reached++;
      res.end("apiserver\n");
    });
    apiserver.listen(0, "127.0.0.1");
    await once(apiserver, "listening");
    port = (apiserver.address() as net.AddressInfo).port;
  });
  after(() => {
    process.off("unhandledRejection", onRejection);
    for (const s of endpoints) s.close();
    apiserver.close();
    pool.destroy();
  });

  test("a plain request is answered 502 naming the code, never the header value; the next request is served", async () => {
    const bad = await endpoint("stand-in\nInjected: yes");
    const answer = await raw(bad, [...kubeRequest, "Connection: close"]);
    assert.equal(answer.status, 502);
    assert.match(answer.text, /cannot be sent \(ERR_INVALID_CHAR\)/);
    assert.doesNotMatch(answer.text, /Injected|agent-sa-token/);
    const good = await endpoint(`127.0.0.1:${port}`);
    assert.equal((await raw(good, [...kubeRequest, "Connection: close"])).status, 200);
    assert.equal(reached, 1);
  });

  test("over an HTTP/1.1-only HTTP/2 upstream (the request is built after the HTTP/2 attempt) it is 502 too", async () => {
    const h2 = new Http1OnlyUpstream({ origin: new URL("https://127.0.0.1:1"), ca: Buffer.alloc(0), idleMs: 1000 });
    const bad = await endpoint("stand-in\nInjected: yes", h2);
    const answer = await raw(bad, [...kubeRequest, "Connection: close"]);
    assert.equal(answer.status, 502);
    assert.match(answer.text, /cannot be sent \(ERR_INVALID_CHAR\)/);
  });

  test("an upgrade is answered 502 on its connection", async () => {
    const bad = await endpoint("stand-in\nInjected: yes");
    const answer = await raw(bad, [...kubeRequest, "Connection: Upgrade", "Upgrade: SPDY/3.1"]);
    assert.equal(answer.status, 502);
    assert.match(answer.text, /cannot be sent \(ERR_INVALID_CHAR\)/);
  });

  test("no rejection went unhandled", async () => {
    // Unhandled rejections are reported after the microtasks of the tick that rejected.
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(rejections, []);
  });
});
