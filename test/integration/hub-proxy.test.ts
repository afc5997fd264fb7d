/**
 * A managed cluster whose only way out is a forward proxy: the agent reaches the proxy-server
 * through the proxy in HTTPS_PROXY (http:// with Basic auth, and https:// verified with
 * --https-proxy-ca-cert), and traffic relays through that tunnel as through a direct one.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import * as net from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { dialConnect } from "@cluster-proxy/client";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { Harness, echoServer, type ServerPorts } from "../framework/harness.js";
import { waitFor } from "../framework/waits.js";

/** A forward proxy answering CONNECT (requiring `auth` when given); records each request. */
async function forwardProxy(
  h: Harness,
  opts: { auth?: string; tls?: { cert: string; key: string } },
): Promise<{ port: number; requests: string[] }> {
  const requests: string[] = [];
  const server = opts.tls ? https.createServer(opts.tls) : http.createServer();
  server.on("connect", (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    requests.push(`${req.method} ${req.url} ${req.headers["proxy-authorization"] ?? "-"}`);
    if (opts.auth && req.headers["proxy-authorization"] !== `Basic ${Buffer.from(opts.auth).toString("base64")}`) {
      client.end("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n");
      return;
    }
    const [host, port] = (req.url ?? "").split(/:(?=\d+$)/) as [string, string];
    const upstream = net.connect(Number(port), host, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  h.onClose(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as net.AddressInfo).port, requests };
}

describe("the agent reaches the hub through a forward proxy (HTTPS_PROXY)", { timeout: 120_000 }, () => {
  const h = new Harness();
  let ports: ServerPorts;
  let echo: number;
  const env = (extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv => {
    const e = { ...process.env };
    for (const k of ["HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"]) delete e[k];
    return { ...e, ...extra };
  };
  const roundTrip = async (cluster: string): Promise<string> => {
    const tlsOpts = h.clientTls();
    const s = await dialConnect(`127.0.0.1.${cluster}:${echo}`, {
      proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts },
    });
    s.write("ping\n");
    const [reply] = (await once(s, "data")) as [Buffer];
    s.destroy();
    return reply.toString();
  };

  before(async () => {
    await h.init(["east", "west", "north"]);
    ({ ports } = await h.startServer());
    echo = await echoServer(h);
  });
  after(() => h.close());

  test("http:// proxy with Basic auth: the agent's connection goes through it, bytes relay", async () => {
    const proxy = await forwardProxy(h, { auth: "agent:s3cret" });
    await h.startAgent(
      "east",
      ports.agent,
      [],
      true,
      env({ HTTPS_PROXY: `http://agent:s3cret@127.0.0.1:${proxy.port}` }),
    );
    assert.equal(await roundTrip("east"), "ping\n");
    assert.ok(
      proxy.requests.some((r) => r.startsWith(`CONNECT 127.0.0.1:${ports.agent} Basic `)),
      proxy.requests.join("\n"),
    );
  });

  test("https:// proxy verified with --https-proxy-ca-cert", async () => {
    const ca = await createCertificateAuthority({ commonName: "corporate proxy CA" });
    const cert = await issueCertificate(ca, { commonName: "proxy", ipAddresses: ["127.0.0.1"], usage: "server" });
    const caFile = join(h.dir, "proxy-ca.crt");
    writeFileSync(caFile, ca.certPem);
    const proxy = await forwardProxy(h, { tls: { cert: cert.certPem, key: cert.keyPem } });
    await h.startAgent(
      "west",
      ports.agent,
      [`--https-proxy-ca-cert=${caFile}`],
      true,
      env({ HTTPS_PROXY: `https://127.0.0.1:${proxy.port}` }),
    );
    assert.equal(await roundTrip("west"), "ping\n");
    assert.equal(proxy.requests.length, 1, proxy.requests.join("\n"));
  });

  test("a proxy that refuses says so in the agent's log; NO_PROXY bypasses it", async () => {
    const proxy = await forwardProxy(h, { auth: "agent:right" });
    const refused = await h.startAgent(
      "north",
      ports.agent,
      [],
      false,
      env({ HTTPS_PROXY: `http://agent:wrong@127.0.0.1:${proxy.port}` }),
    );
    await waitFor(
      "the refusal in the agent's log",
      () => /407 Proxy Authentication Required/.test(refused.proc.output()),
      30_000,
    );
    await refused.proc.kill();
    const direct = await h.startAgent(
      "north",
      ports.agent,
      [],
      true,
      env({ HTTPS_PROXY: `http://127.0.0.1:${proxy.port}`, NO_PROXY: "localhost,127.0.0.0/8" }),
    );
    assert.ok(direct);
    const before = proxy.requests.length;
    assert.equal(await roundTrip("north"), "ping\n");
    assert.equal(proxy.requests.length, before, "NO_PROXY: no request through the proxy");
  });
});
