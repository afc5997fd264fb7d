/** The main job: `cluster-proxy up` as a user runs it, reached with real curl. */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { Harness, freePort, waitFor, type Proc } from "./harness.js";

const run = promisify(execFile);
const h = new Harness();
after(() => h.close());

async function freeBase(): Promise<number> {
  // a base whose base..base+15 range is free: start from a kernel-picked port
  for (let i = 0; i < 20; i++) {
    const p = await freePort();
    if (p + 15 < 65_000) return p;
  }
  throw new Error("no free port range");
}

test("cluster-proxy up: curl through its HTTP CONNECT doors reaches both demo clusters", async () => {
  await h.init([]);
  // base..base+15 must be free; another process may hold one of them, so retry on a conflict
  let base = 0;
  let up: Proc | undefined;
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
    else assert.match(p.output(), /port/i, `up exited for another reason than a busy port:\n${p.output()}`);
  }
  assert.ok(up, "up could not find free ports in 3 attempts");
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
