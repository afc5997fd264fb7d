/** The main job: `cluster-proxy up` as a user runs it, reached with real curl. */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { once } from "node:events";
import * as net from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { Harness, waitFor, type Proc } from "./harness.js";

const run = promisify(execFile);
const h = new Harness();
after(() => h.close());

/** Whether `port` can be listened on at 127.0.0.1 right now. */
async function canListen(port: number): Promise<boolean> {
  const srv = net.createServer();
  try {
    srv.listen(port, "127.0.0.1");
    await once(srv, "listening");
    return true;
  } catch {
    return false;
  } finally {
    srv.close();
  }
}

async function freeBase(): Promise<number> {
  // base..base+15 must be free. Below the kernel's ephemeral range (32768+), so the local ports
  // of the many connections earlier test files made cannot collide with it.
  for (let i = 0; i < 50; i++) {
    const base = 10_000 + Math.floor(Math.random() * 20_000);
    let free = true;
    for (let p = base; free && p < base + 16; p++) free = await canListen(p);
    if (free) return base;
  }
  throw new Error("no free port range");
}

test("cluster-proxy up: curl through its HTTP CONNECT doors reaches both demo clusters", async () => {
  await h.init([]);
  // base..base+15 must be free; another process may hold one of them, so retry on a conflict
  let base = 0;
  let up: Proc | undefined;
  const failures: string[] = [];
  for (let attempt = 0; attempt < 3 && !up; attempt++) {
    base = await freeBase();
    const p = h.spawnCli("up", ["up", "--port-base", String(base), "--state-dir", join(h.dir, "state")]);
    let exited = false;
    void p.exited.then(() => (exited = true));
    await waitFor(
      "up to print its instructions or exit",
      () => exited || /Running; press Ctrl-C/.test(p.output()),
      60_000,
      100,
    );
    if (!exited) up = p;
    else {
      assert.match(
        p.output(),
        /already in use|EADDRINUSE/i,
        `up exited for another reason than a busy port:\n${p.output()}`,
      );
      failures.push(p.output().slice(-1500));
    }
  }
  assert.ok(up, `up could not find free ports in 3 attempts:\n${failures.join("\n---\n")}`);
  for (const cluster of ["east", "west"]) {
    const plain = await run("curl", [
      "-sS",
      "--max-time",
      "10",
      "-p",
      "-x",
      `http://127.0.0.1:${base}`,
      `http://${cluster}:80/`,
    ]);
    assert.match(plain.stdout, new RegExp(`hello from ${cluster}`));
    const certs = join(h.dir, "state", "certs");
    const mtls = await run("curl", [
      "-sS",
      "--max-time",
      "10",
      "-p",
      "-x",
      `https://127.0.0.1:${base + 13}`,
      "--proxy-cacert",
      join(certs, "ca.crt"),
      "--proxy-cert",
      join(certs, "client.crt"),
      "--proxy-key",
      join(certs, "client.key"),
      `http://${cluster}:80/`,
    ]);
    assert.match(mtls.stdout, new RegExp(`hello from ${cluster}`));
  }
  // an unknown cluster: the proxy answers 500 No agent available
  const bad = await run("curl", [
    "-s",
    "-o",
    "/dev/null",
    "-w",
    "%{http_connect}",
    "-p",
    "-x",
    `http://127.0.0.1:${base}`,
    "http://nowhere:80/",
  ]).catch((e: { stdout: string }) => e);
  assert.equal(bad.stdout, "500");
  up.child.kill("SIGINT");
  assert.equal(await up.exited, 0, up.output());
});
