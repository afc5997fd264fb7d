/**
 * Interop with OUR proxy-server in the middle (issue 4): the real Go konnectivity-client (via
 * test/infra/go-peers/client, `konnectivity-go-client`), the Go `proxy-test-client` and curl in front;
 * our agent or the real Go agent (v0.36.0) behind. The Go-server pairings: go-server.test.ts.
 * Cases are written once in matrix.ts (pairingSuite, haSuite); processes: go-harness.ts.
 *
 * Pairings and cases (Y = covered, - = does not apply, with the reason):
 *
 * | case                                   | Go client→our srv→our agent | Go client→our srv→Go agent | proxy-test-client→our srv | curl→our CONNECT→Go agent |
 * |----------------------------------------|-----|-----|-----|-----|
 * | small request                          | Y   | Y   | Y grpc (mTLS, UDS) + http-connect | Y |
 * | 64 MiB byte-exact each way             | Y (tcp mode) | Y | - fixed GET of the test server | Y (download + POST) |
 * | 50 concurrent, some cancelled mid-dial | Y 40 ok + 10 cancelled at 300 ms on a target whose SYNs hang | Y | - one request at a time | Y (curl --max-time 0.5) |
 * | refused destination, text through      | Y   | Y   | Y   | Y (502; body read via raw CONNECT: curl hides it) |
 * | unknown cluster: No agent available    | Y   | Y   | Y   | Y (500) |
 * | client close → destination sees FIN    | Y (--stdin-eof=close) | Y | - no knob | Y (curl killed) |
 * | destination close → all bytes, EOF     | Y   | Y   | - (body check only) | Y (64 MiB download) |
 * | agent killed mid-transfer              | Y   | Y   | -   | Y |
 * | DRAIN → new dials go to the other agent| Y   | Y   | -   | - single agent; covered in the Go agent column |
 * | int64 random > 2^53 exact              | Y raw DIAL_REQ 2^63−1 etc. through this server+agent; the Go client's own rand.Int63 randoms (≈99.9 % above 2^53) cannot be chosen, but a mangled echo would hang its dials | Y | - | - CONNECT has no client random |
 * | destHost (case, IPv4/IPv6 literals)    | Y (tcp mode: Go's HTTP client lower-cases hosts) | Y | - | Y (unknown, LOCALHOST, 127.0.0.4 → 500) |
 * | HA: Go agent → balancer → 3 our servers| -   | Y (haSuite) | - | - |
 *
 * Section 8 of the protocol doc: covered here 3 (mTLS+UDS), 4 (64 MiB instead of 20/10), 5, 6, 9
 * (no_agent), 11, 12, 15 (kill; restart is in test/integration), 17 (Go agent vs 3 of ours), 20,
 * 21, 23 (curl and proxy-test-client through the CONNECT door), 28. Not here: 1/2/13/18/24/25/26
 * (handshake, bad metadata, unknown connectID, duplicate server, token auth, ALPN, keepalive):
 * agent-port details covered by the packages' unit tests with Go-shaped packets, not yet
 * against the Go binaries; 7 (blackhole: the test netns has no route, dials fail at once; the
 * 5 s dial timeout path is exercised by the hanging target in case 5); 8/10 (an agent that never
 * answers needs a fake agent, not a Go binary); 14 (slow reader, 10 s+); 16 (server restart: in
 * test/integration); 19 (leases need a kube-apiserver); 22 (needs the kube environment); 27
 * (our SDK chunks writes; the 5 MiB frame check is in test/integration against our server).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import * as http from "node:http";
import type * as net from "node:net";
import { join } from "node:path";
import { HttpConnectError, dialConnect } from "@cluster-proxy/client";
import { Harness, PatternStream, freePort, helloServer, tcpBalancer } from "../framework/harness.js";
import { waitFor } from "../framework/waits.js";
import { haSuite, lowPort, pairingSuite, startHttpTestServer, withTimeout } from "./matrix.js";
import {
  GoClientDriver,
  MiB,
  goBin,
  hangTarget,
  metric,
  namedHttp,
  notePairing,
  patternHash,
  reportPairings,
  startGoAgent,
  startTsServer,
  type AgentCtl,
  type ServerCtl,
} from "../framework/go-harness.js";

pairingSuite({ client: "go", server: "ts", agent: "ts" });
pairingSuite({ client: "go", server: "ts", agent: "go" });
haSuite({ server: "ts", agent: "go", client: "go", counts: [3] });

/** Run a process to its end (killed after `timeoutMs`); never rejects. */
function run(
  cmd: string,
  args: string[],
  timeoutMs = 30_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 64 * MiB, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: unknown }).code as number | null) : 0;
      resolve({ code: typeof code === "number" ? code : null, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

describe(
  "Go proxy-test-client -> our server (gRPC over mTLS and UDS, HTTP CONNECT) -> Go agent",
  { timeout: 120_000 },
  () => {
    const h = new Harness();
    let server: ServerCtl;
    let uds = "";
    let target = 0;
    before(async () => {
      goBin();
      await h.init(["a"]);
      uds = join(h.dir, "grpc.sock");
      server = await startTsServer(h, [`--uds-name=${uds}`]);
      await startGoAgent(h, server.agentPort, { cluster: "a", identifiers: "host=localhost&ipv4=127.0.0.1" });
      target = await startHttpTestServer(h);
      notePairing("Go proxy-test-client -> our server (grpc, grpc over UDS, http-connect) -> Go agent");
    });
    after(() => h.close());

    const tc = (args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> => {
      const c = h.certs;
      return run(join(goBin(), "proxy-test-client"), [
        `--ca-cert=${c.ca.cert}`,
        `--client-cert=${c.client.cert}`,
        `--client-key=${c.client.key}`,
        "--proxy-host=127.0.0.1",
        "--request-host=localhost",
        `--request-port=${target}`,
        ...args,
      ]);
    };

    for (const mode of ["grpc", "http-connect"] as const) {
      const port = (): number => (mode === "grpc" ? server.grpcPort : server.connectPort!);
      test(`${mode}: /success three times, body through`, async () => {
        const r = await tc([`--mode=${mode}`, `--proxy-port=${port()}`, "--request-path=success", "--test-requests=3"]);
        assert.equal(r.code, 0, r.stderr);
        assert.equal((r.stderr.match(/The success test page/g) ?? []).length, 3, r.stderr);
      });
      test(`${mode}: refused destination and unknown cluster fail with the server's text`, async () => {
        const closed = await lowPort();
        const refused = await tc([`--mode=${mode}`, `--proxy-port=${port()}`, `--request-port=${closed}`]);
        assert.notEqual(refused.code, 0);
        assert.match(refused.stderr, /connection refused|502/);
        const unknown = await tc([`--mode=${mode}`, `--proxy-port=${port()}`, "--request-host=nowhere"]);
        assert.notEqual(unknown.code, 0);
        assert.match(unknown.stderr, /No agent available|500/);
      });
    }
    test("grpc over the Unix socket (insecure, as kube-apiserver's egress selector)", async () => {
      const r = await run(join(goBin(), "proxy-test-client"), [
        "--mode=grpc",
        "--proxy-host=",
        "--proxy-port=0",
        `--proxy-uds=${uds}`,
        "--request-host=localhost",
        `--request-port=${target}`,
        "--request-path=success",
      ]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /The success test page/);
    });
  },
);

describe("curl -> our server's HTTP CONNECT door (mTLS) -> Go agent", { timeout: 180_000 }, () => {
  const h = new Harness();
  let server: ServerCtl;
  let agent: AgentCtl;
  let web = 0;
  let hang = 0;
  let slowEnds = 0;
  let curlArgs: string[] = [];
  before(async () => {
    goBin();
    await h.init(["a"]);
    server = await startTsServer(h);
    agent = await startGoAgent(h, server.agentPort, { cluster: "a", identifiers: "host=localhost&ipv4=127.0.0.1" });
    hang = await hangTarget(h);
    // /source/<n>/<seed>: n pattern bytes then close; POST /sink: sha256 and length of the body;
    // /slow: a chunk every 50 ms forever (records when the client side went away).
    const srv = http.createServer((req, res) => {
      const parts = (req.url ?? "").split("/");
      if (parts[1] === "source") {
        const total = Number(parts[2]);
        const gen = new PatternStream(Number(parts[3]));
        res.writeHead(200, { "content-type": "application/octet-stream" });
        let sent = 0;
        const pump = (): void => {
          while (sent < total) {
            const chunk = gen.next(Math.min(256 * 1024, total - sent));
            sent += chunk.length;
            if (!res.write(chunk)) return void res.once("drain", pump);
          }
          res.end();
        };
        pump();
      } else if (parts[1] === "sink") {
        const hash = createHash("sha256");
        let n = 0;
        req.on("data", (c: Buffer) => {
          hash.update(c);
          n += c.length;
        });
        req.on("end", () => res.end(`${hash.digest("hex")} ${n}`));
      } else if (parts[1] === "slow") {
        res.writeHead(200);
        const t = setInterval(() => res.write("x".repeat(1024)), 50);
        req.socket.once("end", () => slowEnds++);
        req.socket.once("close", () => clearInterval(t));
      } else res.end(`hello ${req.url}`);
    });
    srv.listen(0, "127.0.0.1");
    await once(srv, "listening");
    h.onClose(() => {
      srv.closeAllConnections();
      srv.close();
    });
    web = (srv.address() as net.AddressInfo).port;
    const c = h.certs;
    curlArgs = [
      "-sS",
      "--proxy",
      `https://127.0.0.1:${server.connectPort}`,
      "--proxy-cacert",
      c.ca.cert,
      "--proxy-cert",
      c.client.cert,
      "--proxy-key",
      c.client.key,
      "--proxytunnel",
    ];
    notePairing("curl -> our server's HTTP CONNECT door -> Go agent");
  });
  after(() => h.close());

  const curl = (args: string[], timeoutMs?: number): Promise<{ code: number | null; stdout: string; stderr: string }> =>
    run("curl", [...curlArgs, ...args], timeoutMs);

  test("small request", async () => {
    const r = await curl([`http://localhost:${web}/small`]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "hello /small");
  });

  test("64 MiB byte-exact each way", async () => {
    const size = 64 * MiB;
    const down = spawn("curl", [...curlArgs, `http://127.0.0.1:${web}/source/${size}/21`], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const hash = createHash("sha256");
    let n = 0;
    down.stdout.on("data", (c: Buffer) => {
      hash.update(c);
      n += c.length;
    });
    const [code] = (await once(down, "exit")) as [number];
    assert.equal(code, 0);
    assert.equal(n, size);
    assert.equal(hash.digest("hex"), patternHash(size, 21));
    const file = join(h.dir, "upload.bin");
    const gen = new PatternStream(22);
    writeFileSync(file, Buffer.concat(Array.from({ length: 64 }, () => gen.next(MiB))));
    const up = await curl(
      ["--data-binary", `@${file}`, "-H", "content-type: application/octet-stream", `http://127.0.0.1:${web}/sink`],
      60_000,
    );
    assert.equal(up.code, 0, up.stderr);
    assert.equal(up.stdout, `${patternHash(size, 22)} ${size}`);
  });

  test("50 concurrent tunnels, 10 to a hanging destination cancelled mid-dial; nothing leaks", async () => {
    const results = await Promise.all([
      ...Array.from({ length: 40 }, (_, i) => curl([`http://127.0.0.1:${web}/c${i}`])),
      ...Array.from({ length: 10 }, () => curl(["--max-time", "0.5", `http://127.0.0.1:${hang}/`])),
    ]);
    results.slice(0, 40).forEach((r, i) => assert.equal(r.stdout, `hello /c${i}`, r.stderr));
    for (const r of results.slice(40)) assert.equal(r.code, 28, r.stderr); // operation timed out
    await waitFor(
      "no connections left on the server",
      async () =>
        (await metric(server.healthPort, "konnectivity_network_proxy_server_established_connections")) === 0 &&
        (await metric(server.healthPort, "konnectivity_network_proxy_server_pending_backend_dials")) === 0,
      15_000,
      200,
    );
  });

  test("refused destination: 502 with the agent's error text", async () => {
    const closed = await freePort();
    const r = await curl([`http://127.0.0.1:${closed}/`]);
    assert.equal(r.code, 56, r.stderr);
    assert.match(r.stderr, /CONNECT tunnel failed, response 502/);
    // curl does not show the body of a failed CONNECT; read it with a raw CONNECT.
    const c = h.certs;
    const { readFileSync } = await import("node:fs");
    const proxy = {
      host: "127.0.0.1",
      port: server.connectPort!,
      ca: readFileSync(c.ca.cert),
      cert: readFileSync(c.client.cert),
      key: readFileSync(c.client.key),
    };
    await assert.rejects(
      dialConnect(`127.0.0.1:${closed}`, { proxy }),
      (e: Error) => e instanceof HttpConnectError && e.statusCode === 502 && /connection refused/.test(e.body),
    );
  });

  test("unknown cluster and destHost case sensitivity: 500 No agent available", async () => {
    for (const host of ["nowhere", "127.0.0.4", "LOCALHOST"]) {
      const r = await curl([`http://${host}:${web}/`]);
      assert.equal(r.code, 56, `${host}: ${r.stderr}`);
      assert.match(r.stderr, /response 500/, host);
    }
  });

  test("client close (curl killed): the destination sees the connection end", async () => {
    const ends = slowEnds;
    const p = spawn("curl", [...curlArgs, `http://127.0.0.1:${web}/slow`], { stdio: ["ignore", "pipe", "ignore"] });
    await once(p.stdout, "data");
    p.kill("SIGKILL");
    await waitFor("FIN at the destination", () => slowEnds === ends + 1, 10_000);
  });

  test("agent killed mid-transfer: curl ends promptly with a partial body", async () => {
    const total = 4096 * MiB;
    const p = spawn("curl", [...curlArgs, `http://127.0.0.1:${web}/source/${total}/3`], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let n = 0;
    p.stdout.on("data", (c: Buffer) => (n += c.length));
    const exited = once(p, "exit") as Promise<[number]>;
    await waitFor("some bytes", () => n > 4 * MiB, 15_000, 10);
    const t0 = Date.now();
    await agent.kill();
    const [code] = await withTimeout(exited, 10_000);
    assert.notEqual(code, 0);
    assert.ok(n < total);
    assert.ok(Date.now() - t0 < 5000);
  });
});

describe(
  "Go agent with a per-cluster certificate -> our server with --agent-identity=certificate (the default)",
  { timeout: 120_000 },
  () => {
    const h = new Harness();
    before(async () => {
      goBin();
      await h.init(["a", "b"]);
    });
    after(() => h.close());

    test("host=<cluster> and the addon's host=<cluster>.<ns> are accepted; a claim the certificate does not grant is refused", async () => {
      const { ports } = await h.startServer();
      const web = await helloServer(h, "web");
      const good = await startGoAgent(h, ports.agent, {
        cluster: "a",
        agentId: "go-agent-a",
        identifiers: "host=a&host=a.open-cluster-management-agent-addon",
      });
      const liar = await startGoAgent(h, ports.agent, {
        cluster: "b",
        agentId: "go-agent-b-claims-a",
        identifiers: "host=b&host=a",
        waitReady: false,
      });
      await waitFor("the refusal to be counted", async () => {
        return (
          (await metric(
            ports.health,
            "cluster_proxy_server_agent_identity_refusals_total",
            'reason="host_not_granted"',
          )) >= 1
        );
      });
      const tls = h.clientTls();
      for (let i = 0; i < 5; i++) {
        const s = await dialConnect(`localhost.a:${web}`, {
          proxy: { host: "127.0.0.1", port: ports.httpConnect, ...tls },
        });
        let body = "";
        s.on("data", (c: Buffer) => (body += c.toString()));
        const ended = once(s, "end");
        s.write("GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        await withTimeout(ended, 10_000);
        assert.match(body, /hello from web \/x/);
      }
      assert.equal(await good.dials(), 5);
      assert.equal(await liar.dials(), 0, "the refused agent received no dial");
    });
  },
);

after(() => reportPairings("our-server.test.ts"));

describe("our proxy-server draining (SIGTERM) with the Go agent and the Go client", { timeout: 180_000 }, () => {
  const h = new Harness();
  after(() => h.close());

  test("the Go agent leaves the draining server (GOAWAY) for the other, which keeps proxying; the drained one exits", async () => {
    goBin();
    await h.init(["a"]);
    notePairing("drain: Go agent -> balancer -> 2 our servers, one draining (Go client)");
    const hello = await namedHttp(h, [{ host: "127.0.0.1", name: "v4" }]);
    const leaving = await startTsServer(h, [
      "--server-count=2",
      "--server-id=leaving",
      "--graceful-shutdown-timeout=60s",
    ]);
    const staying = await startTsServer(h, ["--server-count=2", "--server-id=staying"]);
    const lb = await tcpBalancer(h, [leaving.agentPort, staying.agentPort]);
    const agent = await startGoAgent(h, lb, { cluster: "a", agentId: "go-drain-agent", identifiers: "ipv4=127.0.0.1" });
    const connections = (): Promise<number> =>
      metric(agent.healthPort, "konnectivity_network_proxy_agent_open_server_connections");
    await waitFor("the Go agent on both servers", async () => (await connections()) === 2, 20_000, 100);
    // A tunnel open through the server that will drain.
    const open = await h.tunnelClient(leaving.grpcPort).dial(`127.0.0.1:${hello}`);
    // The Go agent's cut reaches the tunnel as an error naming it.
    const cut = new Promise<Error | undefined>((resolve) => {
      open.once("error", resolve);
      open.once("close", () => resolve(undefined));
    });

    leaving.proc.child.kill("SIGTERM");
    // The Go agent drops the GOAWAY'd connection at its next probe (1 s), which ends the tunnel
    // through it, so the server is idle and exits long before its 60 s drain timeout.
    const code = await withTimeout(leaving.proc.exited, 20_000);
    assert.equal(code, 0, "the draining server exited cleanly");
    const why = await withTimeout(cut, 5_000);
    if (why) assert.match(why.message, /agent go-drain-agent disconnected/);
    // The other server has the Go agent, and the Go client reaches the cluster through it.
    await waitFor("the Go agent on the staying server", async () => (await connections()) === 1, 10_000, 100);
    const body = await new GoClientDriver(h, () => staying.grpcPort).get(`http://127.0.0.1:${hello}/after-drain`);
    assert.equal(body, "v4 /after-drain");
  });
});
