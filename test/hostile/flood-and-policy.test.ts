/**
 * Hostile clients (issue 25, points 4-6), with real server and agent processes on loopback: each
 * attack runs with a bounded count and time, and after each the server and agents are alive, a
 * legitimate CONNECT and gRPC dial succeed (while the attack runs where it lasts), and the
 * attacked process's descriptors and RSS come back near their baseline.
 *
 * - a client that floods DATA for unknown connection ids and never reads the CLOSE_RSP replies
 *   is cut at the stream's control bound; the server's RSS stays bounded;
 * - a dial flood through one server tunnel stops at `--max-dials-per-tunnel` with a DIAL_RSP
 *   error naming the flag; clients of the agent's other tunnel still dial; the agent's
 *   descriptors stay bounded;
 * - every spelling of loopback, `0.0.0.0` and the metadata address (NAT64 and 6to4 included) is
 *   refused by the agent, with the README's deny list and with the default policy (no policy
 *   configured).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import * as http2 from "node:http2";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { DialError, HttpConnectError, TunnelClient, dialConnect, type TunnelSocket } from "@cluster-proxy/client";
import { PROXY_METHOD, encodeData } from "@cluster-proxy/protocol";
import { FRAME_HEADER, openCall, sealFrame, type ClientCall } from "@cluster-proxy/tunnel";
import {
  Harness,
  echoRoundTrip,
  echoServer,
  freePort,
  metricSum,
  tcpBalancer,
  type ServerPorts,
} from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";
import { footprint, rssMiB, waitForBaseline } from "./process-probe.js";

const REFUSAL = "refused by the agent's destination policy";

/** A dial that should be refused; if it connects after all, the socket is closed and the result is that socket. */
function refusedDial(client: TunnelClient, target: string): Promise<TunnelSocket> {
  return client.dial(target).then((s) => {
    s.destroy();
    return s;
  });
}

/** The deny list of docs/guides/security.md (destination policy at the agent). */
const README_DENY = [{ cidrs: ["169.254.0.0/16", "fe80::/10", "127.0.0.0/8", "::1/128"] }];

describe("hostile clients: floods, dial caps and destination spellings", () => {
  const h = new Harness();
  let tlsOpts: { ca: Buffer; cert: Buffer; key: Buffer };
  let echo = 0;
  const clients: TunnelClient[] = [];

  before(async () => {
    await h.init(["east", "west"]);
    tlsOpts = h.clientTls();
    echo = await echoServer(h);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await h.close();
  });

  const grpcClient = (ports: ServerPorts): TunnelClient => {
    const c = new TunnelClient({ proxy: { host: "127.0.0.1", port: ports.server, ...tlsOpts }, dialTimeoutMs: 20_000 });
    clients.push(c);
    return c;
  };

  /** A legitimate CONNECT and a legitimate gRPC dial to the echo server through `address`, each echoing. */
  async function legitimateTraffic(ports: ServerPorts, address: string): Promise<void> {
    const viaConnect = await dialConnect(address, {
      proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts },
    });
    assert.ok(await echoRoundTrip(viaConnect, Buffer.from("connect-ok")), "CONNECT echo");
    const c = grpcClient(ports);
    assert.ok(await echoRoundTrip(await c.dial(address), Buffer.from("grpc-ok")), "gRPC echo");
    await c.close();
  }

  async function healthy(port: number): Promise<boolean> {
    return (await httpGet(`http://127.0.0.1:${port}/healthz`)).status === 200;
  }

  test("a client flooding DATA for unknown connection ids without reading is cut; the server stays bounded", async (t) => {
    const { proc, ports } = await h.startServer();
    // A longer keepalive timeout than the harness's 1 s: the flood keeps the server's CPU busy on
    // a shared 2-core machine, and a late ping answer is not what this test is about.
    await h.startAgent("east", ports.agent, ["--keepalive-timeout=10s"]);
    const pid = proc.child.pid!;
    const baseline = await footprint(pid);

    const session = http2.connect(`https://127.0.0.1:${ports.server}`, tlsOpts);
    session.on("error", () => undefined);
    await once(session, "connect");
    const call: ClientCall = openCall(session, PROXY_METHOD);
    call.pause(); // never reads: every CLOSE_RSP "Unknown connectID" queues at the server
    let peak = baseline.rssMiB;
    const sampler = setInterval(() => {
      rssMiB(pid).then(
        (r) => (peak = Math.max(peak, r)),
        () => undefined,
      );
    }, 100);
    // At most 1,000,000 packets or 60 s: unfixed, ~100,000 packets already queue ~15 MiB of
    // replies and the server grows without bound; fixed, the stream is cut after 4 MiB of them.
    const started = Date.now();
    const attack = (async () => {
      const payload = Buffer.alloc(1, 0x61);
      const deadline = Date.now() + 60_000;
      let sent = 0;
      while (sent < 1_000_000 && !call.closed && Date.now() < deadline) {
        sent++;
        const ok = call.send(sealFrame(encodeData(BigInt(1_000_000 + sent), payload, FRAME_HEADER)));
        if (!ok) {
          await once(call, "drain", { signal: AbortSignal.timeout(5_000) }).catch(() => undefined);
        } else if (sent % 2_000 === 0) {
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
      return sent;
    })();
    try {
      // While it runs: the server answers /healthz and proxies for others.
      assert.ok(await healthy(ports.health), "/healthz during the flood");
      await legitimateTraffic(ports, `localhost.east:${echo}`);
      const sent = await attack;
      t.diagnostic(
        `flood: ${sent} DATA packets in ${Date.now() - started} ms until the cut; server RSS ${baseline.rssMiB.toFixed(0)} MiB, peak +${(peak - baseline.rssMiB).toFixed(0)} MiB`,
      );
      assert.ok(call.closed, `the flooding stream was cut (after ${sent} packets)`);
      await waitFor(
        "the cut to be counted",
        async () =>
          (await metricSum(ports.health, 'cluster_proxy_server_streams_cut_total{service_method="Proxy"}')) === 1,
      );
      assert.ok(
        peak - baseline.rssMiB < 200,
        `server RSS grew ${(peak - baseline.rssMiB).toFixed(0)} MiB over its ${baseline.rssMiB.toFixed(0)} MiB baseline`,
      );
      assert.match(proc.output(), /client stream cut: the client does not read/);
    } finally {
      clearInterval(sampler);
      session.destroy();
      await attack;
    }
    assert.ok(await healthy(ports.health), "/healthz after the flood");
    await legitimateTraffic(ports, `localhost.east:${echo}`);
    const after = await waitForBaseline(pid, baseline, "server");
    t.diagnostic(`after the flood: server fds ${baseline.fds} -> ${after.fds}, RSS ${after.rssMiB.toFixed(0)} MiB`);
    assert.equal(proc.child.exitCode, null, `server alive (fds ${after.fds}, RSS ${after.rssMiB.toFixed(0)} MiB)`);
    await proc.kill();
  });

  test("a dial flood through one tunnel stops at --max-dials-per-tunnel; the other tunnel's clients still dial", async (t) => {
    const a = await h.startServer(["--server-count=2", "--server-id=flood-a"]);
    const b = await h.startServer(["--server-count=2", "--server-id=flood-b"]);
    const lb = await tcpBalancer(h, [a.ports.agent, b.ports.agent]);
    const agent = await h.startAgent("east", lb, ["--max-dials-per-tunnel=40", "--max-dials=60"]);
    for (const s of [a, b]) {
      await waitFor(
        `server ${s.ports.server} has the agent`,
        async () => (await httpGet(`http://127.0.0.1:${s.ports.health}/readyz`)).status === 200,
      );
    }
    const pid = agent.proc.child.pid!;
    const baseline = await footprint(pid);

    // 200 concurrent dials through server a's tunnel, each holding its connection open.
    const attacker = grpcClient(a.ports);
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, () => attacker.dial(`localhost.east:${echo}`)),
    );
    const held = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason as Error] : []));
    try {
      assert.equal(held.length, 40, "exactly the per-tunnel cap got through");
      assert.equal(refused.length, 160);
      for (const err of refused) {
        assert.ok(err instanceof DialError, String(err));
        assert.match(
          err.message,
          /refused: the agent already holds 40 endpoint connections through this proxy server's tunnel \(--max-dials-per-tunnel=40\)/,
        );
      }
      assert.equal(
        await metricSum(
          agent.healthPort,
          'cluster_proxy_agent_dial_limit_refusals_total{flag="--max-dials-per-tunnel"}',
        ),
        160,
      );
      const during = await footprint(pid);
      t.diagnostic(
        `dial flood: ${held.length} held, ${refused.length} refused; agent fds ${baseline.fds} -> ${during.fds}, RSS ${baseline.rssMiB.toFixed(0)} -> ${during.rssMiB.toFixed(0)} MiB`,
      );
      assert.ok(during.fds <= baseline.fds + 40 + 16, `agent fds ${during.fds} (baseline ${baseline.fds}, cap 40)`);
      // while the flood holds the cap: the other server's clients dial, the agent answers health
      await legitimateTraffic(b.ports, `localhost.east:${echo}`);
      assert.ok(await healthy(agent.healthPort), "agent /healthz");
      await assert.rejects(
        grpcClient(a.ports).dial(`localhost.east:${echo}`),
        /--max-dials-per-tunnel=40/,
        "the flooded tunnel answers new dials with the clear error",
      );
    } finally {
      for (const s of held) s.destroy();
      await attacker.close();
    }
    const back = await waitForBaseline(pid, baseline, "agent");
    t.diagnostic(`after the flood: agent fds ${back.fds}, RSS ${back.rssMiB.toFixed(0)} MiB`);
    await legitimateTraffic(a.ports, `localhost.east:${echo}`);
    assert.equal(agent.proc.child.exitCode, null, "agent alive");
    for (const s of [a, b]) assert.ok(await healthy(s.ports.health));
  });

  describe("every spelling of this host and of the metadata address is refused", () => {
    let admin = 0;

    /** Dial targets reaching the agent's own admin port, or the metadata service. */
    const ownPortSpellings = (port: number): string[] =>
      [
        "127.0.0.1",
        "0.0.0.0",
        "0",
        "127.1",
        "0x7f.0.0.1",
        "0x7f000001",
        "2130706433",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::1]",
        "[::]",
        "[::127.0.0.1]",
        // NAT64 and 6to4 spellings reach the IPv4 address through a translator or relay.
        "[64:ff9b::7f00:1]",
        "[64:ff9b::127.0.0.1]",
        "[2002:7f00:1::]",
        "localhost",
      ].map((host) => `${host}:${port}`);
    const METADATA = [
      "169.254.169.254:80",
      "0251.0376.0251.0376:80",
      "0xa9fea9fe:80",
      "[::ffff:169.254.169.254]:80",
      "[::ffff:a9fe:a9fe]:80",
      "[fe80::1]:80",
      "[64:ff9b::a9fe:a9fe]:80",
      "[64:ff9b:1::a9fe:a9fe]:80",
      "[2002:a9fe:a9fe::1]:80",
      "[::ffff:0:a9fe:a9fe]:80",
    ];

    before(async () => {
      admin = await freePort();
      const policy = join(h.dir, "readme-deny.json");
      await writeFile(policy, JSON.stringify({ deny: README_DENY }));
    });

    for (const variant of ["the README's deny list", "the default policy (none configured)"] as const) {
      test(`with ${variant}`, async () => {
        const { ports } = await h.startServer(["--proxy-strategies=default"]);
        const flags = [`--admin-server-port=${admin}`, "--health-server-host=127.0.0.1"];
        if (variant === "the README's deny list") flags.push(`--destination-policy=${join(h.dir, "readme-deny.json")}`);
        const agent = await h.startAgent("east", ports.agent, flags);
        try {
          // the admin port is there to be reached (locally)
          assert.equal((await httpGet(`http://127.0.0.1:${admin}/metrics`)).status, 200);
          const client = grpcClient(ports);
          const targets = [...ownPortSpellings(admin), ...ownPortSpellings(agent.healthPort), ...METADATA];
          for (const target of targets) {
            await assert.rejects(
              refusedDial(client, target),
              (e: Error) => e instanceof DialError && e.message.includes(REFUSAL),
              `${target} must be refused by the policy`,
            );
          }
          await assert.rejects(
            dialConnect(`0.0.0.0:${admin}`, { proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tlsOpts } }),
            (e: Error) => e instanceof HttpConnectError && e.statusCode === 403 && e.body.includes(REFUSAL),
          );
          assert.equal(
            await metricSum(
              agent.healthPort,
              'konnectivity_network_proxy_agent_endpoint_dial_failure_total{reason="policy"}',
            ),
            targets.length + 1,
          );
          // the agent is alive, and other destinations still work where the policy allows them
          assert.ok(await healthy(agent.healthPort));
          if (variant === "the default policy (none configured)") {
            await legitimateTraffic(ports, `127.0.0.1:${echo}`);
            const ok: TunnelSocket = await client.dial(`0x7f.1:${echo}`);
            assert.ok(await echoRoundTrip(ok, Buffer.from("spelled")), "another port of this host, spelled in hex");
          } else {
            await assert.rejects(refusedDial(client, `127.0.0.1:${echo}`), new RegExp(REFUSAL));
          }
        } finally {
          await agent.proc.kill();
        }
      });
    }
  });
});
