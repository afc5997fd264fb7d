/**
 * A proxy-server that vanishes while it drains (issue 43): its node is lost, or the pod is killed
 * and its network torn down before the FIN goes out. The client SDK's session got the server's
 * GOAWAY when the drain began, so no HTTP/2 ping can be sent on it any more; the tunnels still open
 * through it must still end, with an error, within the client's TCP keepalive (ms of idle, then ten
 * probes a second apart), not hang until the application gives up. This is what ends a watch
 * through the gateway (a TunnelClient with keepalive pings) whose proxy-server vanished mid-drain.
 *
 * The same holds for a tunnel through the HTTP CONNECT door (dialConnect), which the drain also
 * leaves open.
 *
 * The client runs in a network namespace of the test's own, joined by a veth; the server and the
 * agent (the built CLI) on the runner's. The fault: the client's namespace drops every packet.
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Harness, echoServer } from "../framework/harness.js";
import { failIfMissing } from "../framework/prerequisites.js";
import { PeerNamespace, blackholePrerequisite } from "../framework/peer-namespace.js";
import { REPO } from "../framework/repo.js";
import { waitFor } from "../framework/waits.js";

/** The client's TCP keepalive idle time: probes follow every second, ten of them. */
const TCP_KEEPALIVE_MS = 1_000;
/** How long the cut-off tunnel may take to end: the keepalive and its ten probes, with slack for a busy machine. */
const NOTICED_WITHIN_MS = 30_000;

/**
 * A client of the SDK with two tunnels to an echo target, kept open: one through the gRPC door
 * (a TunnelClient, with keepalive pings as the gateway's), one through the HTTP CONNECT door
 * (dialConnect). Prints what happens to each.
 */
const CLIENT = `
import { readFileSync } from "node:fs";
import { TunnelClient, dialConnect } from "@cluster-proxy/client";
const e = process.env;
const tls = { servername: "localhost", ca: readFileSync(e.VS_CA), cert: readFileSync(e.VS_CERT), key: readFileSync(e.VS_KEY) };
const tcpKeepaliveMs = Number(e.VS_TCP_KEEPALIVE);
const client = new TunnelClient({
  proxy: { host: e.VS_HOST, port: Number(e.VS_GRPC_PORT), ...tls },
  dialTimeoutMs: 10000, keepaliveMs: 1000, tcpKeepaliveMs,
});
function watch(door, s) {
  let got = "";
  s.on("data", (d) => { got += d; if (got.includes("vanish hello")) console.log(door + " ready"); });
  s.on("error", (err) => console.log(door + " tunnel error: " + err.message));
  s.on("close", () => console.log(door + " tunnel closed"));
  s.write("vanish hello\\n");
}
watch("grpc", await client.dial(e.VS_TARGET));
watch("connect", await dialConnect(e.VS_TARGET, {
  proxy: { host: e.VS_HOST, port: Number(e.VS_CONNECT_PORT), ...tls }, timeoutMs: 10000, tcpKeepaliveMs,
}));
setInterval(() => undefined, 1 << 30);
`;

describe("a proxy-server that vanishes while draining", { skip: blackholePrerequisite.skip }, () => {
  const h = new Harness();
  let ns: PeerNamespace | undefined;
  after(async () => {
    await h.close();
    ns?.close();
  });

  test("the SDK's tunnels through it (gRPC and HTTP CONNECT) end with an error within the client's TCP keepalive", async (t) => {
    failIfMissing(blackholePrerequisite.missing);
    await h.init(["east"]);
    const echoPort = await echoServer(h);
    const { proc: server, ports } = await h.startServer([
      // The gRPC door on every address, for the client in its namespace; a drain that would wait
      // for the open tunnel far longer than this test, so only the client's keepalive can end it.
      "--server-bind-address=0.0.0.0",
      "--http-connect-bind-address=0.0.0.0",
      "--graceful-shutdown-timeout=10m",
      "--shutdown-delay=0s",
      "--log-level=info",
    ]);
    await h.startAgent("east", ports.agent);
    const peer = new PeerNamespace("v", "10.204.0");
    ns = peer;
    const { cmd, args } = peer.exec([process.execPath, "--input-type=module", "-e", CLIENT]);
    const client = h.spawnProc("client in its namespace", cmd, args, {
      cwd: REPO,
      env: {
        ...process.env,
        VS_HOST: peer.hostAddress,
        VS_GRPC_PORT: String(ports.server),
        VS_CONNECT_PORT: String(ports.httpConnect),
        VS_CA: h.certs.ca.cert,
        VS_CERT: h.certs.client.cert,
        VS_KEY: h.certs.client.key,
        VS_TARGET: `127.0.0.1.east:${echoPort}`,
        VS_TCP_KEEPALIVE: String(TCP_KEEPALIVE_MS),
      },
    });
    await waitFor(
      "the client's tunnels to echo",
      () => client.output().includes("grpc ready") && client.output().includes("connect ready"),
      30_000,
    );

    // The drain begins: GOAWAY on the client's session; the tunnel stays open (the drain waits for it).
    server.child.kill("SIGTERM");
    await waitFor("the server's drain (GOAWAY on every session)", () => server.output().includes("GOAWAY"), 30_000);
    assert.doesNotMatch(client.output(), /tunnel (error|closed)/, "the drain must not cut the open tunnels");

    // The server vanishes from where the client stands: nothing comes back, not even a FIN.
    peer.blackhole();
    const cutAt = Date.now();
    await waitFor(
      "both of the client's tunnels to end with an error after the server vanished",
      () => /grpc tunnel error: /.test(client.output()) && /connect tunnel error: /.test(client.output()),
      NOTICED_WITHIN_MS,
      100,
    );
    const noticedMs = Date.now() - cutAt;
    t.diagnostic(
      `the tunnels through a draining proxy-server that vanished ended ${noticedMs} ms later (TCP keepalive ${TCP_KEEPALIVE_MS} ms, ten 1 s probes):\n${client.output().trim()}`,
    );
  });
});
