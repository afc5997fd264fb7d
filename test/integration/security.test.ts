/**
 * Security end to end (issue 5, points 2 and 3) with real server and agent processes on loopback:
 * the server binds an agent's identifiers to the clusters its certificate grants (and the
 * `--agent-identity=shared` compatibility mode lifts that), and the agent's destination policy
 * refuses dials with a text that reaches gRPC and HTTP CONNECT clients.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import type * as net from "node:net";
import { join } from "node:path";
import { DialError, HttpConnectError, TunnelClient, dialConnect, type TunnelSocket } from "@cluster-proxy/client";
import { Harness, echoServer, freePort, helloServer, type ServerPorts } from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";

async function metric(port: number, name: string): Promise<number> {
  const { body } = await httpGet(`http://127.0.0.1:${port}/metrics`);
  let total = 0;
  for (const line of body.split("\n")) if (line.startsWith(name)) total += Number(line.split(" ").pop());
  return total;
}

/** Read a tunnelled socket until it ends. */
function readAll(s: TunnelSocket | net.Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    s.on("data", (c: Buffer) => (text += c.toString()));
    s.once("end", () => resolve(text));
    s.once("error", reject);
  });
}

async function httpThrough(s: TunnelSocket | net.Socket, host: string): Promise<string> {
  const reply = readAll(s);
  s.write(`GET /x HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  return reply;
}

const REFUSAL = "refused by the agent's destination policy";

describe("security: certificate-bound agent identity and the agent's destination policy", () => {
  const h = new Harness();
  let tlsOpts: { ca: Buffer; cert: Buffer; key: Buffer };
  let hello = 0;
  let echo = 0;

  before(async () => {
    await h.init(["east", "west"]);
    tlsOpts = h.clientTls();
    hello = await helloServer(h, "target");
    echo = await echoServer(h);
  });
  after(() => h.close());

  const connect = (ports: ServerPorts, address: string): Promise<net.Socket> =>
    dialConnect(address, { proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts } });

  test("an agent with a certificate for east claiming host=west is refused and counted; west traffic never reaches it", async () => {
    const { ports } = await h.startServer();
    const liar = await h.startAgent("east", ports.agent, ["--agent-identifiers=host=west"], false);
    await waitFor("the refusal to be counted", async () => {
      const n = await metric(
        ports.health,
        'cluster_proxy_server_agent_identity_refusals_total{reason="host_not_granted"}',
      );
      return n >= 1;
    });
    // the agent logs the server's answer (JSON, so quotes appear escaped)
    const refusal = /host=west\\*" is not granted by the agent's certificate \(it grants \\*"east\\*"\)/;
    await waitFor("the agent to log the server's refusal", () => refusal.test(liar.proc.output()));
    assert.match(liar.proc.output(), /gRPC status 7/, "PERMISSION_DENIED");
    assert.equal((await httpGet(`http://127.0.0.1:${liar.healthPort}/readyz`)).status, 503);
    await assert.rejects(
      connect(ports, `localhost.west:${hello}`),
      (e: Error) => e instanceof HttpConnectError && e.statusCode === 500 && e.body.includes("No agent available"),
    );
    await assert.rejects(
      connect(ports, `localhost.east:${hello}`),
      (e: Error) => e instanceof HttpConnectError && e.statusCode === 500,
      "refused agents are not registered under any name",
    );
    assert.equal(
      await metric(liar.healthPort, "konnectivity_network_proxy_agent_dial_duration_seconds_count"),
      0,
      "the agent dialled nothing",
    );
    // the honest agents next to it work
    await h.startAgent("west", ports.agent);
    const s = await connect(ports, `localhost.west:${hello}`);
    assert.match(await httpThrough(s, "west"), /hello from target \/x/);
    assert.equal(await metric(liar.healthPort, "konnectivity_network_proxy_agent_dial_duration_seconds_count"), 0);
    await liar.proc.kill();
  });

  test("separate trust: an agent's certificate is refused at the client front doors, a client's at the agent port", async () => {
    const { ports } = await h.startServer();
    await h.startAgent("east", ports.agent);
    const east = h.certs.agents.get("east")!;
    const asAgent = { ca: tlsOpts.ca, cert: readFileSync(east.cert), key: readFileSync(east.key) };
    // HTTP CONNECT over mTLS: the agent's certificate gets no answer; the client's reaches east
    await assert.rejects(
      dialConnect(`localhost.east:${hello}`, { proxy: { host: "127.0.0.1", port: ports.httpConnect, ...asAgent } }),
    );
    const ok = await connect(ports, `localhost.east:${hello}`);
    assert.match(await httpThrough(ok, "east"), /hello from target \/x/);
    // gRPC front door
    const grpcAsAgent = new TunnelClient({ proxy: { host: "127.0.0.1", port: ports.server, ...asAgent } });
    try {
      await assert.rejects(grpcAsAgent.dial(`localhost.east:${hello}`));
    } finally {
      await grpcAsAgent.close();
    }
    // an agent process presenting the hub client certificate never gets a tunnel
    const impostor = await h.startAgent(
      "west",
      ports.agent,
      [`--agent-cert=${h.certs.client.cert}`, `--agent-key=${h.certs.client.key}`],
      false,
    );
    await waitFor(
      "the impostor agent to try and fail",
      () => /cannot connect to proxy server/.test(impostor.proc.output()),
      15_000,
    );
    assert.equal((await httpGet(`http://127.0.0.1:${impostor.healthPort}/readyz`)).status, 503);
    await assert.rejects(
      connect(ports, `localhost.west:${hello}`),
      (e: Error) => e instanceof HttpConnectError && e.statusCode === 500,
    );
    await impostor.proc.kill();
  });

  test("--agent-identity=shared (compatibility mode) accepts the same agent", async () => {
    const { ports } = await h.startServer(["--agent-identity=shared"]);
    const agent = await h.startAgent("east", ports.agent, ["--agent-identifiers=host=west"]);
    const s = await connect(ports, `localhost.west:${hello}`);
    assert.match(await httpThrough(s, "west"), /hello from target \/x/);
    assert.equal(await metric(ports.health, "cluster_proxy_server_agent_identity_refusals_total"), 0);
    await agent.proc.kill();
  });

  describe("destination policy at the agent", () => {
    let ports: ServerPorts;
    let agentHealth = 0;
    let client: TunnelClient;
    let closed = 0;

    before(async () => {
      closed = await freePort();
      ports = (await h.startServer()).ports;
      const policy = join(h.dir, "policy.json");
      await writeFile(
        policy,
        JSON.stringify({
          allow: [
            { hosts: ["localhost"], ports: [hello, echo] },
            { cidrs: ["127.0.0.1/32"], ports: [hello] },
          ],
          deny: [{ cidrs: ["127.0.0.0/8", "::1/128"], ports: [echo] }],
        }),
      );
      const agent = await h.startAgent("west", ports.agent, [
        `--destination-policy=${policy}`,
        `--apiserver-address=127.0.0.1:${hello}`,
      ]);
      agentHealth = agent.healthPort;
      client = new TunnelClient({
        proxy: { host: "127.0.0.1", port: ports.server, ...tlsOpts },
        dialTimeoutMs: 10_000,
      });
    });
    after(() => client?.close());

    test("allowed dials work: a name, an address, and the apiserver mapping of the cluster name", async () => {
      assert.match(await httpThrough(await connect(ports, `localhost.west:${hello}`), "a"), /hello from target/);
      assert.match(await httpThrough(await client.dial(`127.0.0.1.west:${hello}`), "b"), /hello from target/);
      // west:443 goes to --apiserver-address (127.0.0.1:<hello>), which the CIDR rule allows
      assert.match(await httpThrough(await client.dial("west:443"), "c"), /hello from target/);
    });

    test("a forbidden port: the refusal text reaches gRPC clients and CONNECT answers 403", async () => {
      const text = `dial to 127.0.0.1:${closed} ${REFUSAL} (allowed: localhost:${hello},${echo}; 127.0.0.1/32:${hello})`;
      await assert.rejects(client.dial(`127.0.0.1.west:${closed}`), (e: Error) => {
        assert.ok(e instanceof DialError, String(e));
        assert.ok(e.message.includes(text), e.message);
        return true;
      });
      await assert.rejects(connect(ports, `127.0.0.1.west:${closed}`), (e: Error) => {
        assert.ok(e instanceof HttpConnectError, String(e));
        assert.equal(e.statusCode, 403);
        assert.equal(e.body, text);
        return true;
      });
    });

    test("a name resolving into a denied CIDR is refused (resolved, then judged)", async () => {
      await assert.rejects(connect(ports, `localhost.west:${echo}`), (e: Error) => {
        assert.ok(e instanceof HttpConnectError, String(e));
        assert.equal(e.statusCode, 403);
        assert.match(
          e.body,
          new RegExp(
            `^dial to localhost:${echo} \\(resolves to [^)]*127\\.0\\.0\\.1[^)]*\\) ${REFUSAL} \\(denied by deny\\[0\\]`,
          ),
        );
        return true;
      });
      await assert.rejects(
        client.dial(`localhost.west:${echo}`),
        (e: Error) => e instanceof DialError && e.message.includes(REFUSAL),
      );
    });

    test("refusals are counted at the agent", async () => {
      const n = await metric(
        agentHealth,
        'konnectivity_network_proxy_agent_endpoint_dial_failure_total{reason="policy"}',
      );
      assert.ok(n >= 4, `policy refusals counted: ${n}`);
    });
  });
});
