/**
 * What the data-plane packages load. No undici: an ES import of `node:http` would load it, for
 * ~10 MiB of RSS in every agent and server (packages/kit/src/node-http.ts). And the client SDK,
 * which runs inside users' programs, loads none of the process tooling of the components
 * (`node:v8`, `node:vm`, `node:perf_hooks`: `@cluster-proxy/kit/process`). Each import runs in
 * a fresh process on this node with the loader flags of this one (source or dist alike).
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
    import.meta.resolve("../../agent/src/gateway-endpoint/gateway-endpoint.ts"),
    import.meta.resolve("../../agent/src/gateway-endpoint/gateway-upstreams.ts"),
  ],
  // What `cluster-proxy agent` runs (agent-loader.ts); written by `npm run build`.
  "agent bundle": [import.meta.resolve("../dist/agent-bundle.js")],
  server: ["@cluster-proxy/server"],
  "client SDK": ["@cluster-proxy/client"],
};

/** The built-in modules of `modules`' graph, as `process.moduleLoadList` names them. */
async function loadedBy(modules: readonly string[]): Promise<string[]> {
  const script = `for (const m of ${JSON.stringify(modules)}) await import(m);
process.stdout.write(JSON.stringify(process.moduleLoadList));`;
  const { stdout } = await run(process.execPath, [...process.execArgv, "--input-type=module", "-e", script], {
    cwd: import.meta.dirname,
  });
  return JSON.parse(stdout) as string[];
}

for (const [what, modules] of Object.entries(LOADS)) {
  test(`${what}: loading it does not load undici`, async () => {
    assert.deepEqual(
      (await loadedBy(modules)).filter((m) => m.includes("undici")),
      [],
    );
  });
}

test("client SDK: loading it does not load the components' process tooling", async () => {
  const tooling = ["NativeModule v8", "NativeModule vm", "NativeModule perf_hooks"];
  assert.deepEqual(
    (await loadedBy(LOADS["client SDK"])).filter((m) => tooling.includes(m)),
    [],
  );
});
