/**
 * The per-pairing interop cases (issue 4), written once and run for every client/server/agent
 * pairing by {@link pairingSuite}. See the tables at the top of the `*.test.ts` files for which
 * case applies to which pairing and why.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { Harness, PatternStream, freePort, tcpBalancer, transferServer } from "../framework/harness.js";
import { httpGet } from "../framework/http.js";
import { waitFor } from "../framework/waits.js";
import {
  GoClientDriver,
  MiB,
  TsClientDriver,
  finTarget,
  goBin,
  hangTarget,
  metric,
  namedHttp,
  notePairing,
  patternHash,
  rawDial,
  startGoAgent,
  startGoServer,
  startTsAgent,
  startTsServer,
  type AgentCtl,
  type AgentOptions,
  type Driver,
  type ServerCtl,
} from "../framework/go-harness.js";

export interface PairingDef {
  client: "go" | "ts";
  server: "go" | "ts";
  agent: "go" | "ts";
}

const label = { go: "Go", ts: "our" } as const;
export function pairingName(d: PairingDef): string {
  return `${label[d.client]} client -> ${label[d.server]} server -> ${label[d.agent]} agent`;
}

/** A port the Go http-test-server accepts (1024-49151). */
export async function lowPort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const p = await freePort();
    if (p <= 49151) return p;
  }
  throw new Error("no free port <= 49151");
}

export async function startHttpTestServer(h: Harness): Promise<number> {
  const port = await lowPort();
  const proc = h.spawnProc("http-test-server", join(goBin(), "http-test-server"), [`--server-port=${port}`]);
  await waitFor(
    `http-test-server on ${port}\n${proc.output()}`,
    async () => (await httpGet(`http://127.0.0.1:${port}/success`)).status === 200,
  );
  return port;
}

const NO_AGENT = /No agent available/;

export function pairingSuite(d: PairingDef): void {
  const name = pairingName(d);
  describe(name, { timeout: 240_000 }, () => {
    const h = new Harness();
    let server: ServerCtl;
    let driver: Driver;
    let agentA: AgentCtl;
    let agentB: AgentCtl | undefined;
    let agentA2: AgentCtl | undefined;
    let goTarget = 0;
    let hello = 0;
    let transfer = 0;
    let hang = 0;
    let fin: Awaited<ReturnType<typeof finTarget>>;

    const startAgent = (o: AgentOptions): Promise<AgentCtl> =>
      d.agent === "go" ? startGoAgent(h, server.agentPort, o) : startTsAgent(h, server.agentPort, o);

    before(async () => {
      goBin();
      await h.init(["a", "b", "c"]);
      server = d.server === "go" ? await startGoServer(h) : await startTsServer(h);
      driver =
        d.client === "go" ? new GoClientDriver(h, () => server.grpcPort) : new TsClientDriver(h, () => server.grpcPort);
      goTarget = await startHttpTestServer(h);
      hello = await namedHttp(h, [
        { host: "127.0.0.1", name: "v4" },
        { host: "127.0.0.2", name: "two" },
        { host: "127.0.0.3", name: "three" },
        { host: "::1", name: "v6" },
      ]);
      transfer = await transferServer(h);
      hang = await hangTarget(h);
      fin = await finTarget(h);
      agentA = await startAgent({
        cluster: "a",
        agentId: `${d.agent}-agent-a`,
        identifiers: "ipv4=127.0.0.1&host=localhost&ipv4=127.0.0.2",
      });
      await waitFor("server ready", async () => (await metricReady(server)) === true, 15_000);
      notePairing(name);
    });
    after(() => h.close());

    test("small request (Go http-test-server /success)", async () => {
      const body = await driver.get(`http://127.0.0.1:${goTarget}/success`);
      assert.match(body, /success/i);
      assert.equal(await driver.get(`http://127.0.0.1:${hello}/small?x=1`), "v4 /small?x=1");
    });

    test("64 MiB byte-exact from destination to client", async () => {
      const size = 64 * MiB;
      const c = await driver.open(`127.0.0.1:${transfer}`);
      await c.write(`source ${size} 5\n`);
      c.endInput();
      assert.equal(await c.done, "eof");
      assert.equal(c.received(), size);
      assert.equal(c.hash(), patternHash(size, 5));
    });

    test("64 MiB byte-exact from client to destination", async () => {
      const size = 64 * MiB;
      const c = await driver.open(`127.0.0.1:${transfer}`, { keep: true });
      await c.write(`sink ${size}\n`);
      const gen = new PatternStream(6);
      for (let sent = 0; sent < size; sent += MiB) await c.write(gen.next(MiB));
      c.endInput();
      assert.equal(await c.done, "eof");
      assert.equal(c.bytes().toString(), `${patternHash(size, 6)} ${size}\n`);
    });

    test("50 concurrent single-use tunnels, 10 of them cancelled mid-dial; nothing leaks", async () => {
      const r = await driver.burst(`http://127.0.0.1:${hello}/burst`, 40, `http://127.0.0.1:${hang}/`, 10, 300);
      assert.deepEqual(r, { ok: 40, cancelled: 10, errors: [] });
      // The hung dials end at the agent's 5 s dial timeout; then every gauge is back to 0.
      await waitFor(
        "no pending/established connections left",
        async () =>
          (await metric(server.healthPort, "konnectivity_network_proxy_server_established_connections")) === 0 &&
          (await metric(server.healthPort, "konnectivity_network_proxy_server_pending_backend_dials")) === 0 &&
          (await metric(agentA.healthPort, "konnectivity_network_proxy_agent_open_endpoint_connections")) === 0,
        15_000,
        200,
      );
      assert.equal(await driver.get(`http://127.0.0.1:${hello}/after`), "v4 /after");
    });

    test("refused destination: the agent's error text is passed through", async () => {
      const closed = await freePort();
      await assert.rejects(driver.get(`http://127.0.0.1:${closed}/`), /connection refused|ECONNREFUSED/);
    });

    test("unknown cluster: No agent available", async () => {
      await assert.rejects(driver.get("http://nowhere.invalid:80/"), NO_AGENT);
    });

    test("client close: the destination sees FIN", async () => {
      const ends = fin.ends();
      const c = await driver.open(`127.0.0.1:${fin.port}`, { closeOnInputEnd: true });
      await c.write("hello\n");
      await waitFor("echo", () => c.received() === 6, 10_000);
      c.close();
      await waitFor("FIN at the destination", () => fin.ends() === ends + 1, 10_000);
      assert.equal(await withTimeout(c.done, 11_000), "eof");
    });

    test("destination close: the client gets every byte, then EOF", async () => {
      const size = 3 * MiB + 123;
      const c = await driver.open(`127.0.0.1:${transfer}`);
      await c.write(`source ${size} 9\n`);
      c.endInput();
      assert.equal(await c.done, "eof");
      assert.equal(c.received(), size);
      assert.equal(c.hash(), patternHash(size, 9));
    });

    test("int64 random above 2^53 round-trips exactly", async () => {
      // A raw DIAL_REQ with chosen randoms through this server and agent (our gRPC framing).
      for (const random of [2n ** 63n - 1n, 2n ** 53n + 1n, 9_007_199_254_740_993n + 1234n]) {
        const r = await rawDial(h, server.grpcPort, `127.0.0.1:${hello}`, random);
        assert.equal(r.error, "");
        assert.equal(r.random, random);
        assert.ok(r.connectID > 0n);
      }
      if (driver instanceof TsClientDriver) {
        // Our SDK's own randoms (rand.Int63-like): a dial only completes if the echo matched.
        let big = 0;
        for (let i = 0; i < 5; i++) {
          const s = await driver.dial(`127.0.0.1:${hello}`);
          if (s.dialRandom > 2n ** 53n) big++;
          s.destroy();
        }
        assert.ok(big >= 1);
      }
    });

    test("destHost: exact, case-sensitive, IPv4/IPv6 literals, host names", async () => {
      agentB = await startAgent({
        cluster: "b",
        agentId: `${d.agent}-agent-b`,
        identifiers: "ipv6=::1&ipv4=127.0.0.3&host=Mixed.Case",
      });
      await waitFor(
        "agent B registered",
        async () => (await driver.get(`http://127.0.0.3:${hello}/`).catch(() => "")) === "three /",
        10_000,
        200,
      );
      const a0 = await agentA.dials();
      const b0 = await agentB.dials();
      const get = (address: string): Promise<string> => driver.request(address, "/");
      assert.equal(await get(`127.0.0.2:${hello}`), "two /");
      assert.match(await get(`localhost:${hello}`), /^(v4|v6) \/$/);
      assert.equal(await get(`127.0.0.3:${hello}`), "three /");
      assert.equal(await get(`[::1]:${hello}`), "v6 /");
      assert.equal(await agentA.dials(), a0 + 2, "127.0.0.2 and localhost went to agent A");
      assert.equal(await agentB.dials(), b0 + 2, "127.0.0.3 and [::1] went to agent B");
      // Mixed.Case routes to B, which cannot resolve it: the agent's error, not "No agent".
      const mixed = await get(`Mixed.Case:${hello}`).then(
        () => "ok",
        (e: Error) => e.message,
      );
      assert.doesNotMatch(mixed, NO_AGENT);
      assert.notEqual(mixed, "ok");
      for (const host of ["mixed.case", "MIXED.CASE", "LOCALHOST", "Localhost", "127.0.0.4", "[::2]"]) {
        await assert.rejects(get(`${host}:${hello}`), NO_AGENT, host);
      }
      // Unbracketed IPv6 with a port keeps the port in the key: no match (clients refuse to
      // build this address, so a raw DIAL_REQ sends it).
      const raw = await rawDial(h, server.grpcPort, `::1:${hello}`, 77n);
      assert.match(raw.error, NO_AGENT);
      const bracketless = await rawDial(h, server.grpcPort, "::1", 78n);
      assert.doesNotMatch(bracketless.error, NO_AGENT, "`::1` without port is key ::1 (agent B)");
      await agentB.kill();
    });

    test("DRAIN: new dials go to the other agent; open connections keep working", async () => {
      agentA2 = await startAgent({ cluster: "c", agentId: `${d.agent}-agent-a2`, identifiers: "ipv4=127.0.0.1" });
      const second = agentA2;
      await waitFor(
        "A2 connected to the server",
        async () => (await metric(second.healthPort, "konnectivity_network_proxy_agent_open_server_connections")) === 1,
        10_000,
        50,
      );
      const a0 = await agentA.dials();
      const held = await driver.open(`127.0.0.1:${fin.port}`, { keep: true, closeOnInputEnd: true });
      await held.write("one\n");
      await waitFor("echo one", () => held.received() === 4, 10_000);
      assert.equal(await agentA.dials(), a0 + 1, "the first registered agent (A) serves 127.0.0.1");
      agentA.drain();
      // The Go agent v0.36 sends DRAIN when its receive loop wakes: traffic on the held conn.
      await held.write("two\n");
      await waitFor("echo two", () => held.received() === 8, 10_000);
      const a2start = await agentA2.dials();
      await waitFor(
        "a dial served by A2",
        async () => {
          await driver.get(`http://127.0.0.1:${hello}/drain`);
          return (await agentA2!.dials()) > a2start;
        },
        10_000,
        100,
      );
      const a1 = await agentA.dials();
      const a2 = await agentA2.dials();
      for (let i = 0; i < 5; i++) assert.equal(await driver.get(`http://127.0.0.1:${hello}/d${i}`), `v4 /d${i}`);
      assert.equal(await agentA.dials(), a1, "no new dial on the draining agent");
      assert.equal(await agentA2.dials(), a2 + 5);
      await held.write("three\n");
      await waitFor("echo on the drained agent's connection", () => held.received() === 14, 10_000);
      assert.equal(held.bytes().toString(), "one\ntwo\nthree\n");
      held.close();
      await withTimeout(held.done, 11_000);
    });

    test("agent killed mid-transfer: the client's connection ends promptly", async () => {
      const total = 4096 * MiB;
      const c = await driver.open(`127.0.0.1:${transfer}`);
      await c.write(`source ${total} 3\n`);
      c.endInput();
      await waitFor("some bytes", () => c.received() > 4 * MiB, 15_000, 10);
      const t0 = Date.now();
      await agentA2!.kill();
      const how = await withTimeout(c.done, 15_000);
      const took = Date.now() - t0;
      assert.ok(c.received() < total);
      assert.ok(took < 5000, `ended ${took} ms after the kill (${how})`);
    });
  });
}

async function metricReady(server: ServerCtl): Promise<boolean> {
  return (await httpGet(`http://127.0.0.1:${server.healthPort}/readyz`)).status === 200;
}

export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms).unref()),
  ]);
}

/**
 * HA: one agent behind a round-robin TCP balancer in front of `n` servers (`--server-count=n`,
 * distinct server IDs): the agent ends up connected to every server and each server proxies.
 */
export function haSuite(o: { server: "go" | "ts"; agent: "go" | "ts"; client: "go" | "ts"; counts: number[] }): void {
  for (const n of o.counts) {
    const name = `HA: ${label[o.agent]} agent -> balancer -> ${n} ${label[o.server]} servers (${label[o.client]} client)`;
    describe(name, { timeout: 120_000 }, () => {
      const h = new Harness();
      after(() => h.close());
      test("the agent connects to every server and every server proxies", async () => {
        goBin();
        await h.init(["a"]);
        notePairing(name);
        const hello = await namedHttp(h, [{ host: "127.0.0.1", name: "v4" }]);
        const servers: ServerCtl[] = [];
        for (let i = 0; i < n; i++) {
          const id = `${o.server}-server-${i}`;
          servers.push(
            o.server === "go"
              ? await startGoServer(h, { serverCount: n, serverId: id })
              : await startTsServer(h, [`--server-count=${n}`, `--server-id=${id}`]),
          );
        }
        const lb = await tcpBalancer(
          h,
          servers.map((s) => s.agentPort),
        );
        const ao: AgentOptions = { cluster: "a", agentId: `${o.agent}-ha-agent`, identifiers: "ipv4=127.0.0.1" };
        const agent = o.agent === "go" ? await startGoAgent(h, lb, ao) : await startTsAgent(h, lb, ao);
        for (const s of servers)
          await waitFor(`server ${s.healthPort} has the agent`, () => metricReady(s), 20_000, 100);
        await waitFor(
          `agent reports ${n} server connections`,
          async () =>
            (await metric(agent.healthPort, "konnectivity_network_proxy_agent_open_server_connections")) === n,
          10_000,
          100,
        );
        for (const [i, s] of servers.entries()) {
          const driver =
            o.client === "go" ? new GoClientDriver(h, () => s.grpcPort) : new TsClientDriver(h, () => s.grpcPort);
          assert.equal(await driver.get(`http://127.0.0.1:${hello}/via-${i}`), `v4 /via-${i}`);
        }
        // Still exactly n after more sync rounds (no duplicate connections kept). Time is what this
        // checks: a second of sync rounds (every 100 ms) passes, and the count has not moved.
        await new Promise((r) => setTimeout(r, 1000));
        assert.equal(await metric(agent.healthPort, "konnectivity_network_proxy_agent_open_server_connections"), n);
      });
    });
  }
}
