import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as http from "node:http";
import * as https from "node:https";
import type * as net from "node:net";
import type { AddressInfo } from "node:net";
import { PacketType } from "@cluster-proxy/protocol";
import { TunnelClient } from "./tunnel-client.js";
import { createTunnelAgent, createTunnelHttpsAgent } from "./tunnel-agent.js";
import { createTestPki, type TestPki } from "@cluster-proxy/pki/testing";
import { FakeProxyServer } from "./testing/fake-proxy-server.js";

function get(url: string, options: http.RequestOptions): Promise<{ status: number; body: string; socketId: string }> {
  const mod = url.startsWith("https:") ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.get(url, options, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body, socketId: String(res.headers["x-socket"] ?? "") }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
  });
}

/** A target server that answers with its path and a per-connection id (to see keep-alive reuse). */
function handler(req: http.IncomingMessage, res: http.ServerResponse): void {
  const socket = req.socket as net.Socket & { cpId?: number };
  socket.cpId ??= ++connections;
  res.setHeader("x-socket", String(socket.cpId));
  res.end(`hello from ${req.headers.host}${req.url}`);
}
let connections = 0;

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

describe("http.Agent and https.Agent through the tunnel", { timeout: 30_000 }, () => {
  let pki: TestPki;
  let target: http.Server;
  let secureTarget: https.Server;
  let fake: FakeProxyServer;
  let client: TunnelClient;

  before(async () => {
    pki = await createTestPki();
    target = http.createServer(handler);
    secureTarget = https.createServer({ key: pki.serverKey, cert: pki.serverCert }, handler);
    const port = await listen(target);
    const securePort = await listen(secureTarget);
    fake = await new FakeProxyServer({
      pki,
      targets: { "east:80": { host: "127.0.0.1", port }, "east:443": { host: "127.0.0.1", port: securePort } },
    }).start();
    client = new TunnelClient({
      proxy: { host: "localhost", port: fake.port, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey },
    });
  });
  after(async () => {
    await client.close();
    await fake.close();
    target.closeAllConnections();
    secureTarget.closeAllConnections();
    await Promise.all([target, secureTarget].map((s) => new Promise<void>((r) => s.close(() => r()))));
    pki.cleanup();
  });

  test("GET http://east/ dials east:80; keep-alive reuses the tunnel", async () => {
    const agent = createTunnelAgent({ client, keepAlive: true });
    try {
      const dialsBefore = fake.received.filter((p) => p.packet.type === PacketType.DIAL_REQ).length;
      const first = await get("http://east/one", { agent });
      assert.equal(first.status, 200);
      assert.equal(first.body, "hello from east/one");
      const second = await get("http://east/two", { agent });
      assert.equal(second.body, "hello from east/two");
      assert.equal(second.socketId, first.socketId, "same connection");
      const dials = fake.received.filter((p) => "dialRequest" in p.packet).slice(dialsBefore);
      assert.equal(dials.length, 1);
      assert.ok("dialRequest" in dials[0]!.packet && dials[0]!.packet.dialRequest.address === "east:80");
    } finally {
      agent.destroy();
    }
  });

  test("GET https://east/ runs TLS to the target inside the tunnel", async () => {
    const agent = createTunnelHttpsAgent({ client, keepAlive: true, ca: pki.ca, servername: "localhost" });
    try {
      const res = await get("https://east/secure", { agent });
      assert.equal(res.status, 200);
      assert.equal(res.body, "hello from east/secure");
    } finally {
      agent.destroy();
    }
  });

  test("a dial failure surfaces as the request's error", async () => {
    const agent = createTunnelAgent({ client });
    try {
      await assert.rejects(get("http://noagent:1/", { agent }), /No agent available/);
    } finally {
      agent.destroy();
    }
  });

  test("an agent with its own tunnel options closes its client on destroy()", async () => {
    const agent = createTunnelAgent({
      tunnel: { proxy: { host: "localhost", port: fake.port, ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } },
    });
    const res = await get("http://east/own", { agent });
    assert.equal(res.body, "hello from east/own");
    agent.destroy();
  });
});
