/**
 * The data-plane components do not load undici: an ES import of `node:http` would, for ~10 MiB
 * of RSS in every agent and server (packages/tunnel/src/node-http.ts). Each import runs in a fresh
 * process on this node with the loader flags of this one (source or dist alike).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";

const run = promisify(execFile);

const LOADS = {
  agent: ["@cluster-proxy/agent"],
  // The agent loads its gateway endpoint only when --gateway-ca-file is set: as the manager sets it.
  "agent with its gateway endpoint": [
    "@cluster-proxy/agent",
    import.meta.resolve("../../agent/src/gateway-endpoint.ts"),
    import.meta.resolve("../../agent/src/gateway-upstreams.ts"),
  ],
  server: ["@cluster-proxy/server"],
  "client SDK": ["@cluster-proxy/client"],
};

for (const [what, modules] of Object.entries(LOADS)) {
  test(`${what}: loading it does not load undici`, async () => {
    const script = `for (const m of ${JSON.stringify(modules)}) await import(m);
process.stdout.write(JSON.stringify(process.moduleLoadList.filter((m) => m.includes("undici"))));`;
    const { stdout } = await run(process.execPath, [...process.execArgv, "--input-type=module", "-e", script], {
      cwd: import.meta.dirname,
    });
    assert.deepEqual(JSON.parse(stdout) as string[], []);
  });
}
