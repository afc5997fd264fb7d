import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { forwardAddress, parseForwardSpec } from "./port-forward-command.js";
import { runCli } from "../program.js";

test("port-forward specs: <local-port>:<host>:<port>, addressed inside the cluster", () => {
  assert.deepEqual(parseForwardSpec("8080:web.default.svc:80"), { localPort: 8080, host: "web.default.svc", port: 80 });
  assert.deepEqual(parseForwardSpec("0:[fd00::1]:443"), { localPort: 0, host: "fd00::1", port: 443 });
  for (const bad of ["8080", "8080:web", "x:web:80", "8080:web:0", "70000:web:80", "8080::80"])
    assert.throws(() => parseForwardSpec(bad), /want <local-port>:<host>:<port>/, bad);
  assert.equal(forwardAddress({ localPort: 0, host: "web.default.svc", port: 80 }, "mc1"), "web.default.svc.mc1:80");
  assert.equal(forwardAddress({ localPort: 0, host: "mc1", port: 443 }, "mc1"), "mc1:443", "the cluster's apiserver");
  assert.equal(forwardAddress({ localPort: 0, host: "web.mc1", port: 80 }, "mc1"), "web.mc1:80");
});

test("port-forward refuses a --cluster that is no cluster name, as up and certs do, before any hub is asked", async () => {
  const err: string[] = [];
  const code = await runCli(["port-forward", "--cluster", "North", "0:web:80"], {
    stdout: () => undefined,
    stderr: (t) => void err.push(t),
    env: {},
    signals: new EventEmitter(),
    colors: false,
  });
  assert.equal(code, 2);
  assert.match(err.join(""), /^cluster-proxy port-forward: --cluster: cluster name "North" is invalid/);
});

test("hub operations with no hub at all say what to give, not Invalid URL", async () => {
  const cwd = await mkdtemp(join(tmpdir(), "cp-nohub-"));
  for (const args of [["health"], ["port-forward", "--cluster", "east", "0:web:80"]]) {
    const err: string[] = [];
    const code = await runCli(args, {
      stdout: () => undefined,
      stderr: (t) => void err.push(t),
      env: {},
      signals: new EventEmitter(),
      colors: false,
      cwd,
    });
    assert.equal(code, 2, err.join(""));
    assert.match(
      err.join(""),
      /no hub to ask: start a local one with "cluster-proxy up"[^\n]*--kubeconfig or KUBECONFIG/,
    );
  }
});

test("a --via, --door or --relay-port that is not one of its values is refused naming the flag, before any hub is asked", async () => {
  for (const [args, message] of [
    [
      ["port-forward", "--cluster", "mc1", "--via", "tunnel", "0:web:80"],
      /--via: "tunnel" is not one of auto, apiserver, direct/,
    ],
    [["health", "--via=ssh"], /--via: "ssh" is not one of auto, apiserver, direct/],
    [["relay", "--door", "agent"], /--door: "agent" is not one of connect, grpc, gateway/],
    [["relay", "--port", "70000"], /--port: 70000 is not a port/],
    [["kubeconfig", "--cluster", "mc1", "--token", "t", "--relay-port", "x"], /--relay-port: "x" is not a port/],
  ] as const) {
    const err: string[] = [];
    const code = await runCli([...args], {
      stdout: () => undefined,
      stderr: (t) => void err.push(t),
      env: {},
      signals: new EventEmitter(),
      colors: false,
    });
    assert.equal(code, 2, `${args.join(" ")}: ${err.join("")}`);
    assert.match(err.join(""), message);
  }
});
