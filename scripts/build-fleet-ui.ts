/**
 * Builds the fleet page (packages/fleet/ui, docs/design/fleet-view.md) into packages/fleet/dist/ui:
 * `index.html` and, under `assets/`, `app-<hash>.js` and `app-<hash>.css` (Preact, uPlot and its
 * stylesheet bundled by esbuild, minified). The HTML has no inline script or style (the page's
 * Content-Security-Policy allows `'self'` only) and fetches nothing from another origin. Runs
 * offline, in well under a second; `npm run build` runs it after `tsc -b`.
 *
 *   node --import tsx scripts/build-fleet-ui.ts
 */
import { build } from "esbuild";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** Where the page's sources are. */
export const UI_SOURCE = join(root, "packages/fleet/ui");
/** Where the built page goes. */
export const UI_DIST = join(root, "packages/fleet/dist/ui");

/** What a build wrote: file names relative to the output directory, and sizes in bytes. */
export interface FleetUiBuild {
  js: string;
  css: string;
  bytes: number;
  gzipBytes: number;
}

function page(js: string, css: string): string {
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="color-scheme" content="light dark" />
    <meta name="referrer" content="no-referrer" />
    <title>Fleet · cluster-proxy</title>
    <link rel="icon" href="data:," />
    <link rel="stylesheet" href="${css}" />
    <script type="module" src="${js}"></script>
  </head>
  <body>
    <div id="app"></div>
    <noscript>The fleet view needs JavaScript.</noscript>
  </body>
</html>
`;
}

/** Build the page into `outDir` (emptied first). */
export async function buildFleetUi(outDir = UI_DIST): Promise<FleetUiBuild> {
  rmSync(outDir, { recursive: true, force: true });
  const assets = join(outDir, "assets");
  mkdirSync(assets, { recursive: true });
  const result = await build({
    entryPoints: { app: join(UI_SOURCE, "main.tsx") },
    outdir: assets,
    entryNames: "[name]-[hash]",
    assetNames: "[name]-[hash]",
    bundle: true,
    minify: true,
    format: "esm",
    platform: "browser",
    target: ["es2022"],
    jsx: "automatic",
    jsxImportSource: "preact",
    tsconfig: join(UI_SOURCE, "tsconfig.json"),
    metafile: true,
    logLevel: "warning",
    // The metafile's paths are relative to this; npm may run the build from a symlinked checkout,
    // whose working directory is not `root` as this file's real path gives it.
    absWorkingDir: root,
  });
  const outputs = Object.keys(result.metafile.outputs);
  const js = outputs.find((f) => f.endsWith(".js"));
  const css = outputs.find((f) => f.endsWith(".css"));
  if (js === undefined || css === undefined) throw new Error(`fleet page: esbuild wrote ${outputs.join(", ")}`);
  const rel = (f: string): string => relative(outDir, join(root, f)).split("\\").join("/");
  writeFileSync(join(outDir, "index.html"), page(rel(js), rel(css)));
  const files = [join(root, js), join(root, css), join(outDir, "index.html")].map((f) => readFileSync(f));
  return {
    js: rel(js),
    css: rel(css),
    bytes: files.reduce((a, b) => a + b.length, 0),
    gzipBytes: files.reduce((a, b) => a + gzipSync(b, { level: 9 }).length, 0),
  };
}

if (process.argv[1] !== undefined && basename(process.argv[1]) === basename(fileURLToPath(import.meta.url))) {
  const b = await buildFleetUi();
  console.log(
    `fleet page: ${relative(root, UI_DIST)}/{index.html,${b.js},${b.css}}: ${(b.bytes / 1024).toFixed(1)} KiB, ${(b.gzipBytes / 1024).toFixed(1)} KiB gzipped`,
  );
}
