import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { copyFile, mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import net from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { waitUntil } from "@cluster-proxy/tunnel/testing";
import type { ClusterDetail, FleetRow, FleetSnapshot } from "@cluster-proxy/fleet";
import { probeThroughConnect } from "../hub/cluster-probe.js";
import { runCli } from "../program.js";
import type { SignalSource } from "../commands/shutdown-signals.js";
import { runCaptured } from "../testing/capture.js";
import { startUpInProcess } from "../testing/in-process-up.js";

// Fixed ports are what `up` is about; pick a base unlikely to be taken (below the ephemeral range).
const base = 20_000 + (process.pid % 500) * 20;

let stateDir: string;
before(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "cp-up-"));
});
after(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

function up(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return runCaptured([
    "up",
    "--exit-after-ready",
    "--state-dir",
    stateDir,
    "--log-level",
    "silent",
    "--port-base",
    String(base),
    ...args,
  ]);
}

test("up --exit-after-ready starts the hub, waits for every cluster, prints how to reach them", async () => {
  const first = await up(["--clusters", "east,0west"]);
  assert.equal(first.code, 0, first.err);
  assert.match(first.out, /certificates: wrote 14 files/);
  assert.match(first.out, /cluster east: connected/);
  assert.match(first.out, /cluster 0west: connected/);
  assert.ok(first.out.includes(`curl -p -x http://127.0.0.1:${base} http://east:80/`));
  assert.ok(first.out.includes(`curl -p -x http://127.0.0.1:${base} http://0west:80/`));
  assert.match(first.out, new RegExp(`curl -p -x https://127\\.0\\.0\\.1:${base + 13} --proxy-cacert \\S+ca\\.crt`));
  assert.match(first.out, /import \{ dial, loadProxyTls \} from "@cluster-proxy\/client"/);
  assert.ok(first.out.includes(`Fleet view (live): http://127.0.0.1:${base + 16}/-/fleet/\n`), first.out);

  const second = await up(["--clusters", "east"]);
  assert.equal(second.code, 0, second.err);
  assert.match(second.out, /certificates: reused/);
});

test("a taken port is reported with the port and --port-base", async () => {
  const blocker = net.createServer();
  blocker.listen(base + 10, "127.0.0.1");
  await once(blocker, "listening");
  try {
    const r = await up(["--clusters", "east"]);
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      new RegExp(`^cluster-proxy up: port ${base + 10} \\(gRPC front door, --port-base ${base} \\+ 10\\)`),
    );
    assert.match(r.err, /--port-base/);
  } finally {
    blocker.close();
  }
  const fleetBlocker = net.createServer();
  fleetBlocker.listen(base + 16, "127.0.0.1");
  await once(fleetBlocker, "listening");
  try {
    const r = await up(["--clusters", "east"]);
    assert.equal(r.code, 1);
    assert.match(r.err, new RegExp(`port ${base + 16} \\(fleet view, --port-base ${base} \\+ 16\\)`));
  } finally {
    fleetBlocker.close();
  }
});

test("up's fleet view: rows follow the agents (stopped and started through the test seam), traffic of its doors counts", async () => {
  const up = await startUpInProcess([
    "--state-dir",
    join(stateDir, "fleet"),
    "--log-level",
    "silent",
    "--port-base",
    String(base),
  ]);
  const { agents } = up;
  try {
    const page = /Fleet view \(live\): (\S+)/.exec(up.output())?.[1];
    assert.ok(page, up.output());
    const rows = async (): Promise<Map<string, FleetRow>> => {
      const snapshot = (await (await fetch(`${page}api/clusters`)).json()) as FleetSnapshot;
      return new Map(snapshot.clusters.map((r) => [r.cluster, r]));
    };
    const available = async (cluster: string): Promise<string | undefined> => (await rows()).get(cluster)?.available;
    await waitUntil(
      "east and west available",
      async () => (await available("east")) === "True" && (await available("west")) === "True",
    );
    const east = (await rows()).get("east");
    assert.deepEqual(east?.agentsByServer, { "cluster-proxy-up": 1 });
    assert.ok(east?.latencyMs !== null && east?.agentCertExpiry, JSON.stringify(east));

    await agents.stop("east");
    await waitUntil("east unavailable", async () => (await available("east")) === "False", { timeoutMs: 5_000 });
    assert.match((await rows()).get("east")?.reason ?? "", /no agent connected/);
    assert.equal(await available("west"), "True");
    await agents.start("east");
    await waitUntil("east available again", async () => (await available("east")) === "True", { timeoutMs: 10_000 });

    const traffic = async (): Promise<{ requests: number; bytesIn: number; bytesOut: number }> => {
      const detail = (await (await fetch(`${page}api/clusters/east`)).json()) as ClusterDetail;
      const sum = (k: "requests" | "bytesIn" | "bytesOut"): number => detail.series.reduce((n, p) => n + p[k], 0);
      return { requests: sum("requests"), bytesIn: sum("bytesIn"), bytesOut: sum("bytesOut") };
    };
    const before = await traffic();
    const answer = await probeThroughConnect({ host: "127.0.0.1", port: base }, "east:80", "hello from east", 5_000);
    assert.ok(answer.ok, JSON.stringify(answer));
    await waitUntil("the request in east's traffic", async () => {
      const now = await traffic();
      return now.requests === before.requests + 1 && now.bytesIn > before.bytesIn && now.bytesOut > before.bytesOut;
    });
  } finally {
    assert.equal(await up.stop("SIGINT"), 0, up.output());
  }
});

test("bad --clusters and --port-base values exit 2 naming the flag", async () => {
  const bad = await up(["--clusters", "East"]);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /^cluster-proxy up: --clusters: cluster name "East" is invalid/);
  const reserved = await up(["--clusters", "east,ca"]);
  assert.equal(reserved.code, 2);
  assert.match(reserved.err, /^cluster-proxy up: --clusters: "ca" is reserved/);
  const out = await runCli(["up", "--port-base", "65530", "--state-dir", stateDir], {
    stdout: () => undefined,
    stderr: (t) => assert.match(t, /--port-base: 65530 leaves no room/),
    env: {},
    signals: new EventEmitter() as unknown as SignalSource,
    colors: false,
  });
  assert.equal(out, 2);
});

test("--state-dir naming a file, and a state directory up cannot reuse, say what to do", async () => {
  const file = join(stateDir, "a-file");
  await writeFile(file, "not a directory");
  const r = await runCli(["up", "--state-dir", file, "--exit-after-ready", "--log-level", "silent"], {
    stdout: () => undefined,
    stderr: (t) => assert.match(t, /^cluster-proxy up: --state-dir \S+a-file: not a directory/),
    env: {},
    signals: new EventEmitter() as unknown as SignalSource,
    colors: false,
  });
  assert.equal(r, 2);
  // A client CA without the serving CA: the pki refuses to replace CAs; up names --force.
  const odd = join(stateDir, "odd");
  await mkdir(join(odd, "certs"), { recursive: true });
  const first = await up(["--clusters", "east", "--state-dir", join(stateDir, "seed")]);
  assert.equal(first.code, 0, first.err);
  await copyFile(join(stateDir, "seed", "certs", "client-ca.crt"), join(odd, "certs", "client-ca.crt"));
  await copyFile(join(stateDir, "seed", "certs", "client-ca.key"), join(odd, "certs", "client-ca.key"));
  const refused = await up(["--clusters", "east", "--state-dir", odd]);
  assert.equal(refused.code, 2, refused.err);
  assert.match(refused.err, /--state-dir \S+odd: [^\n]*run up again with --force/);
  const forced = await up(["--clusters", "east", "--state-dir", odd, "--force"]);
  assert.equal(forced.code, 0, forced.err);
  assert.match(forced.out, /certificates: wrote 12 files/, "new CAs, server, client and east's certificates");
});

test("up writes a hub profile that health, kubeconfig and port-forward use, and removes it when it stops", async () => {
  const dir = join(stateDir, "profiled");
  const up = await startUpInProcess([
    "--state-dir",
    dir,
    "--log-level",
    "silent",
    "--port-base",
    String(base),
    "--clusters",
    "east,west",
  ]);
  try {
    const text = up.output();
    const profile = join(dir, "hub.json");
    assert.ok(text.includes(`  cluster-proxy health --hub-profile ${profile}\n`), text);
    assert.ok(
      text.includes(
        `  cluster-proxy kubeconfig --cluster east --token demo-token-east --output ${join(dir, "east.kubeconfig")} --hub-profile ${profile}\n`,
      ),
      text,
    );
    const health = await cli(["health", "--hub-profile", profile]);
    assert.equal(health.code, 0, health.err);
    assert.match(health.out, /^east +True +True +True +\d+ms +-$/m);
    assert.match(health.out, /^west +True +True +True +\d+ms +-$/m);
    const unknown = await cli(["health", "--hub-profile", profile, "--cluster", "north"]);
    assert.equal(unknown.code, 2);
    assert.match(unknown.err, /--cluster: the local hub has no cluster named north \(its clusters: east, west\)/);
    const kc = await cli(["kubeconfig", "--hub-profile", profile, "--cluster", "west", "--token", "demo-token-west"]);
    assert.equal(kc.code, 0, kc.err);
    assert.match(kc.out, new RegExp(`proxy-url: https://west:@127\\.0\\.0\\.1:${base + 13}`));
    await unservedConnectionsEndCleanly(profile);
  } finally {
    assert.equal(await up.stop("SIGINT"), 0, up.output());
  }
  await assert.rejects(stat(join(dir, "hub.json")), /ENOENT/, "the profile goes with the hub");
  const stopped = await cli(["health"], {});
  assert.equal(stopped.code, 2);
  assert.match(stopped.err, /no hub to ask: start a local one with "cluster-proxy up"/);
});

/**
 * A port-forward to a target that refuses: every connection is reported on stderr and closed with
 * a FIN (the client reads an empty reply), never reset, even when the client sent its request at
 * once (a socket closed with unread input is reset).
 */
async function unservedConnectionsEndCleanly(profile: string): Promise<void> {
  const out: string[] = [];
  const signals = new EventEmitter();
  const forwarding = runCli(["port-forward", "--hub-profile", profile, "--cluster", "east", "0:127.0.0.1:1"], {
    stdout: (t) => void out.push(t),
    stderr: (t) => void out.push(t),
    env: {},
    signals,
    colors: false,
  });
  try {
    const listening = /Forwarding from 127\.0\.0\.1:(\d+)/;
    await waitUntil("port-forward to listen", () => listening.test(out.join("")), { timeoutMs: 30_000, everyMs: 20 });
    const port = Number(listening.exec(out.join(""))![1]);
    for (let i = 0; i < 5; i++) {
      // Requests that come after the dial failed and the forwarder closed its side (the race curl
      // loses on a busy machine): they are read and dropped, never answered with a reset, so the
      // client reads an empty reply and closes. Written for a while after the FIN: a reset, had
      // there been one, fails the next write.
      const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true });
      const errors: string[] = [];
      socket.on("error", (err: Error) => errors.push(err.message));
      const received: Buffer[] = [];
      socket.on("data", (c: Buffer) => received.push(c));
      const closed = once(socket, "close");
      await once(socket, "end");
      for (let k = 0; k < 20 && errors.length === 0; k++) {
        await new Promise<void>((resolve) => socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n", () => resolve()));
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      socket.end();
      await closed;
      assert.deepEqual({ errors, bytes: Buffer.concat(received).length }, { errors: [], bytes: 0 }, `connection ${i}`);
    }
    assert.equal(out.join("").match(/to 127\.0\.0\.1\.east:1 failed: /g)?.length, 5, out.join(""));
  } finally {
    signals.emit("SIGINT");
  }
  assert.equal(await forwarding, 0, out.join(""));
}

async function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(args, {
    stdout: (t) => void out.push(t),
    stderr: (t) => void err.push(t),
    env,
    signals: new EventEmitter(),
    colors: false,
  });
  return { code, out: out.join(""), err: err.join("") };
}
