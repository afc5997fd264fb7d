import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import net from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { CliContext } from "./cli-context.js";
import { runCli } from "./program.js";
import type { SignalSource } from "./shutdown-signals.js";

// Fixed ports are what `up` is about; pick a base unlikely to be taken (below the ephemeral range).
const base = 20_000 + (process.pid % 500) * 20;

let stateDir: string;
before(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "cp-up-"));
});
after(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

async function up(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const ctx: CliContext = {
    stdout: (t) => void out.push(t),
    stderr: (t) => void err.push(t),
    env: {},
    signals: new EventEmitter(),
    colors: false,
  };
  const code = await runCli(
    [
      "up",
      "--exit-after-ready",
      "--state-dir",
      stateDir,
      "--log-level",
      "silent",
      "--port-base",
      String(base),
      ...args,
    ],
    ctx,
  );
  return { code, out: out.join(""), err: err.join("") };
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
