import assert from "node:assert/strict";
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import tls from "node:tls";
import type { ReplicaProbe } from "@cluster-proxy/api";
import { createCertificateAuthority, issueCertificate } from "@cluster-proxy/pki";
import { silentLogger } from "@cluster-proxy/kit";
import { ManualClock } from "@cluster-proxy/kit/testing";
import {
  TunnelProber,
  probeThroughReplica,
  type ProbeCredentials,
  type ProbeFn,
  type ProxyServerReplica,
} from "./tunnel-prober.js";

const replicas: ProxyServerReplica[] = [
  { name: "server-a", address: "10.0.0.1" },
  { name: "server-b", address: "10.0.0.2" },
];
const credentials: ProbeCredentials = { port: 1, ca: "", cert: "", key: "", servername: "x" };

/** A prober over scripted outcomes: `outcome(replica, cluster)` per call, every call recorded; on `clock`. */
function scripted(outcome: (replica: string, cluster: string) => boolean | string, clock = new ManualClock()) {
  const calls: string[] = [];
  const changes: string[] = [];
  let latency = 1;
  const probe: ProbeFn = (replica, cluster) => {
    calls.push(`${replica.name}/${cluster}`);
    const r = outcome(replica.name, cluster);
    const base = { server: replica.name, address: replica.address };
    return Promise.resolve(
      r === true ? { ...base, ok: true, latencyMs: latency++ } : { ...base, ok: false, error: String(r) },
    );
  };
  const prober = new TunnelProber(
    {
      intervalMs: 1000,
      timeoutMs: 100,
      replicas: (name) =>
        Promise.resolve(
          name === "missing"
            ? { error: "ManagedProxyConfiguration missing does not exist" }
            : { replicas, credentials },
        ),
      onChange: (c) => changes.push(c),
      probe,
    },
    silentLogger,
    clock,
  );
  return { prober, calls, changes, clock };
}

describe("TunnelProber", () => {
  test("probes every tracked cluster through every replica; reports only changes of the pass/fail picture", async () => {
    const down = new Set<string>();
    const { prober, calls, changes } = scripted((r, c) => (down.has(`${r}/${c}`) ? "no agent" : true));
    prober.track("mc1", "cluster-proxy");
    prober.track("mc2", "cluster-proxy");
    assert.equal(prober.result("mc1"), undefined, "not probed yet");
    await prober.tick();
    assert.deepEqual(calls.sort(), ["server-a/mc1", "server-a/mc2", "server-b/mc1", "server-b/mc2"]);
    assert.deepEqual(changes.sort(), ["mc1", "mc2"]);
    assert.deepEqual(
      prober.result("mc1")?.probes?.map((p) => [p.server, p.ok]),
      [
        ["server-a", true],
        ["server-b", true],
      ],
    );
    // Same picture, other latencies: nothing to write.
    changes.length = 0;
    await prober.tick();
    assert.deepEqual(changes, []);
    // mc1 loses server-b: one change, for mc1 only.
    down.add("server-b/mc1");
    await prober.tick();
    assert.deepEqual(changes, ["mc1"]);
    const b = prober.result("mc1")?.probes?.find((p) => p.server === "server-b");
    assert.deepEqual([b?.ok, b?.error], [false, "no agent"]);
  });

  test("a replica that passed fails only after a second probe at once; one that failed is not probed twice", async () => {
    let failures = 0;
    const { prober, calls } = scripted((r) => (r === "server-a" && failures-- > 0 ? "timeout" : true));
    prober.track("mc1", "cluster-proxy");
    await prober.tick();
    // One lost probe: confirmed by the second, which passes: still ok.
    failures = 1;
    calls.length = 0;
    await prober.tick();
    assert.deepEqual(calls.filter((c) => c.startsWith("server-a")).length, 2);
    assert.equal(prober.result("mc1")?.probes?.find((p) => p.server === "server-a")?.ok, true);
    // Two in a row: failing.
    failures = 2;
    await prober.tick();
    assert.equal(prober.result("mc1")?.probes?.find((p) => p.server === "server-a")?.ok, false);
    // Already failing: one probe per round.
    failures = 100;
    calls.length = 0;
    await prober.tick();
    assert.deepEqual(calls.filter((c) => c.startsWith("server-a")).length, 1);
  });

  test("the last round that passed is kept (with its replicas) while every replica fails, without a change to report", async () => {
    let down = false;
    const { prober, changes, clock } = scripted(() => (down ? "no agent" : true));
    prober.track("mc1", "cluster-proxy");
    clock.advance(5_000);
    await prober.tick();
    const pass = prober.result("mc1")?.lastPass;
    assert.deepEqual(pass?.replicas, ["server-a", "server-b"]);
    assert.equal(pass?.at, 5_000, "on the prober's clock");
    down = true;
    await prober.tick();
    assert.deepEqual(prober.result("mc1")?.lastPass, pass, "kept from the round that passed");
    changes.length = 0;
    await prober.tick();
    assert.deepEqual(changes, [], "the kept pass is no change");
    down = false;
    clock.advance(1_000);
    await prober.tick();
    assert.equal(prober.result("mc1")!.lastPass!.at, 6_000);
  });

  test("run probes a round every interval on its clock, and stops when aborted", async () => {
    const { prober, calls, clock } = scripted(() => true);
    prober.track("mc1", "cluster-proxy");
    const stop = new AbortController();
    const running = prober.run(stop.signal);
    /** Let the round in flight finish (the scripted probes resolve at once: one turn of the event loop). */
    const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
    await settle();
    assert.equal(calls.length, 2, "the first round at once");
    assert.equal(clock.armed, 1, "then a wait for the next");
    clock.advance(999);
    await settle();
    assert.equal(calls.length, 2, "not before the interval");
    clock.advance(1);
    await settle();
    assert.equal(calls.length, 4, "the second round after the interval");
    stop.abort();
    await running;
    assert.equal(clock.armed, 0, "no timer left behind");
  });

  test("a configuration that cannot be probed gives the reason; untracked clusters are forgotten", async () => {
    const { prober, calls, changes } = scripted(() => true);
    prober.track("mc1", "missing");
    await prober.tick();
    assert.deepEqual(calls, []);
    assert.deepEqual(prober.result("mc1"), { error: "ManagedProxyConfiguration missing does not exist" });
    assert.deepEqual(changes, ["mc1"]);
    prober.untrack("mc1");
    await prober.tick();
    assert.equal(prober.result("mc1"), undefined);
  });
});

describe("probeThroughReplica", () => {
  let server: tls.Server;
  let creds: ProbeCredentials;
  const answers = new Map<string, string | null>();
  const heads: string[] = [];
  /** Called with the cluster of each CONNECT the server reads. */
  let onHead: (cluster: string) => void = () => undefined;

  before(async () => {
    const ca = await createCertificateAuthority({ commonName: "test serving CA" });
    const clientCa = await createCertificateAuthority({ commonName: "test client CA" });
    const serving = await issueCertificate(ca, { commonName: "proxy", dnsNames: ["proxy.ns.svc"], usage: "server" });
    const client = await issueCertificate(clientCa, { commonName: "manager", usage: "client" });
    server = tls.createServer(
      { cert: serving.certPem, key: serving.keyPem, ca: clientCa.certPem, requestCert: true, rejectUnauthorized: true },
      (socket) => {
        let head = "";
        socket.setEncoding("latin1");
        socket.on("data", (d: string) => {
          head += d;
          if (!head.includes("\r\n\r\n")) return;
          heads.push(head);
          const cluster = /^CONNECT ([^:]+):443 /.exec(head)?.[1] ?? "";
          onHead(cluster);
          const answer = answers.get(cluster);
          if (answer === null) return; // never answers
          socket.end(answer ?? "HTTP/1.1 200 Connection Established\r\n\r\n");
        });
        socket.on("error", () => undefined);
      },
    );
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    creds = {
      port: (server.address() as AddressInfo).port,
      ca: ca.certPem,
      cert: client.certPem,
      key: client.keyPem,
      servername: "proxy.ns.svc",
    };
  });
  after(() => server.close());

  const probe = (
    cluster: string,
    c: ProbeCredentials = creds,
    timeoutMs = 5000,
    clock?: ManualClock,
  ): Promise<ReplicaProbe> => probeThroughReplica({ name: "p", address: "127.0.0.1" }, cluster, c, timeoutMs, clock);

  test("200 passes with a latency, over mTLS, asking for <cluster>:443", async () => {
    const r = await probe("mc1");
    assert.equal(r.ok, true, r.error);
    assert.ok((r.latencyMs ?? -1) >= 0);
    assert.match(heads.at(-1) ?? "", /^CONNECT mc1:443 HTTP\/1\.1\r\nHost: mc1:443\r\n/);
  });

  test("an error answer fails with the server's own text", async () => {
    answers.set("mc2", "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\r\nno agent available\n");
    const r = await probe("mc2");
    assert.deepEqual([r.ok, r.error], [false, "503 Service Unavailable: no agent available"]);
  });

  test("no answer fails at the timeout; a wrong CA fails naming the TLS error", async () => {
    answers.set("mc3", null);
    const clock = new ManualClock();
    const asked = new Promise<void>((resolve) => {
      onHead = (cluster) => {
        if (cluster === "mc3") resolve();
      };
    });
    // A minute on the manual clock: the test waits for no real one.
    const pending = probe("mc3", creds, 60_000, clock);
    await asked;
    clock.advance(60_000);
    const r = await pending;
    assert.equal(r.ok, false);
    assert.match(r.error ?? "", /no answer within 60000 ms/);
    const other = await createCertificateAuthority({ commonName: "other" });
    const bad = await probe("mc1", { ...creds, ca: other.certPem });
    assert.equal(bad.ok, false);
    assert.match(bad.error ?? "", /certificate/i);
  });
});
