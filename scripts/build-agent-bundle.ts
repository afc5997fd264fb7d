/**
 * Bundles the agent's command tree (packages/cli/dist/agent-program.js, the output of `tsc -b`)
 * with the workspace packages and libraries it imports into packages/cli/dist/agent-bundle.js
 * and its lazily loaded chunks (`agent-bundle-<hash>.js`: what the agent imports only when a flag
 * asks for it, e.g. its gateway endpoint). `cluster-proxy agent` and `proxy-agent` run it
 * (packages/cli/src/agent-loader.ts): an idle agent then holds ~14 MiB less RSS on Node.js 26
 * than with ~250 modules loaded one by one (docs/design/decisions.md, agent idle RSS). Not
 * minified, so stack traces keep their names. Runs offline in about a second; `npm run build`
 * runs it after `tsc -b`.
 *
 *   node --import tsx scripts/build-agent-bundle.ts
 */
import { build } from "esbuild";
import { readdirSync, rmSync, statSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** Where tsc wrote the CLI, and where the bundle goes (beside it: `../package.json` stays the CLI's). */
export const CLI_DIST = join(root, "packages/cli/dist");

/**
 * Left to node's own loader, from node_modules: pino-pretty (text logs on a terminal only) and
 * @kubernetes/client-node (loaded only when the agent publishes its status in a cluster; large,
 * with optional native requires). pino is bundled (0.4 MiB less RSS than its 30 modules loaded
 * one by one); its transports, which start worker threads from files of their own, are not used.
 */
export const AGENT_BUNDLE_EXTERNAL = ["pino-pretty", "@kubernetes/client-node"];

/**
 * Bundled CommonJS libraries (commander, prom-client) `require` node's built-in modules: in an ES
 * module that needs a `require` of its own.
 */
const REQUIRE_BANNER =
  "import { createRequire as __agentBundleCreateRequire } from 'node:module';\n" +
  "const require = __agentBundleCreateRequire(import.meta.url);";

/** Build the bundle; resolves with the files written (relative to the repository) and their total bytes. */
export async function buildAgentBundle(): Promise<{ files: string[]; bytes: number }> {
  for (const f of readdirSync(CLI_DIST)) {
    if (/^agent-bundle(-[A-Z0-9]+)?\.js$/.test(f)) rmSync(join(CLI_DIST, f));
  }
  const result = await build({
    entryPoints: { "agent-bundle": join(CLI_DIST, "agent-program.js") },
    outdir: CLI_DIST,
    chunkNames: "agent-bundle-[hash]",
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: ["node20"],
    external: AGENT_BUNDLE_EXTERNAL,
    banner: { js: REQUIRE_BANNER },
    metafile: true,
    logLevel: "warning",
    // The metafile's paths are relative to this (npm may run the build from a symlinked checkout).
    absWorkingDir: root,
  });
  const files = Object.keys(result.metafile.outputs);
  return { files, bytes: files.reduce((a, f) => a + statSync(join(root, f)).size, 0) };
}

if (process.argv[1] !== undefined && basename(process.argv[1]) === basename(fileURLToPath(import.meta.url))) {
  const b = await buildAgentBundle();
  console.log(
    `agent bundle: ${relative(root, CLI_DIST)}/agent-bundle*.js: ${b.files.length} files, ${(b.bytes / 1024).toFixed(0)} KiB`,
  );
}
