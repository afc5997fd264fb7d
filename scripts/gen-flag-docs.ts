/**
 * Rewrites the flag reference in README.md (between `<!-- flags:begin -->` and
 * `<!-- flags:end -->`) from the option schemas, and the ManagedProxyConfiguration reference
 * (between `<!-- crd:begin -->` and `<!-- crd:end -->`) from the API schema; the table of error
 * codes (between `<!-- errors:begin -->` and `<!-- errors:end -->`) and docs/errors.md from the
 * error catalog (packages/cli/src/error-reference.ts); and the Helm chart's generated files
 * (charts/cluster-proxy: values.schema.json, values.yaml, crds/, the README's values table) from
 * the values schema (packages/cli/src/chart-files.ts).
 *
 *   node --conditions=source --import tsx scripts/gen-flag-docs.ts [--check] [--readme PATH]
 *
 * With `--check` nothing is written; exits 1 when the README is out of date.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  ERROR_REFERENCE_PATH,
  chartFiles,
  errorReferenceMarkdown,
  replaceCrdReference,
  replaceErrorReference,
  replaceFlagReference,
} from "@cluster-proxy/cli";

const args = process.argv.slice(2);
const check = args.includes("--check");
const readmeFlag = args.indexOf("--readme");
const readmePath =
  readmeFlag >= 0 && args[readmeFlag + 1]
    ? args[readmeFlag + 1]!
    : fileURLToPath(new URL("../README.md", import.meta.url));
const unknown = args.filter(
  (a, i) => a !== "--check" && a !== "--readme" && !(readmeFlag >= 0 && i === readmeFlag + 1),
);
if (unknown.length > 0) {
  process.stderr.write(`gen-flag-docs: ${unknown[0]}: unknown argument (use --check, --readme PATH)\n`);
  process.exit(2);
}

let current: string;
try {
  current = await readFile(readmePath, "utf8");
} catch (err) {
  process.stderr.write(`gen-flag-docs: cannot read ${readmePath}: ${(err as Error).message}\n`);
  process.exit(1);
}
let wanted: string;
try {
  wanted = replaceCrdReference(replaceFlagReference(current));
  // The error table and docs/errors.md: only with the repository's own README (as the chart).
  if (readmeFlag < 0) wanted = replaceErrorReference(wanted);
} catch (err) {
  process.stderr.write(`gen-flag-docs: ${readmePath}: ${(err as Error).message}\n`);
  process.exit(1);
}
// The chart's generated files (only with the repository's own README: --readme is for tests).
const files = new Map<string, string>(
  readmeFlag >= 0
    ? []
    : [
        ...(await chartFileTargets()),
        [fileURLToPath(new URL(`../${ERROR_REFERENCE_PATH}`, import.meta.url)), errorReferenceMarkdown()],
      ],
);
files.set(readmePath, wanted);
const stale: string[] = [];
for (const [path, content] of files) {
  const have = path === readmePath ? current : await readFile(path, "utf8").catch(() => "");
  if (have === content) continue;
  stale.push(path);
  if (!check) await writeFile(path, content);
}
if (check && stale.length > 0) {
  process.stderr.write(`gen-flag-docs: out of date (run npm run docs:flags): ${stale.join(", ")}\n`);
  process.exit(1);
}
process.stdout.write(
  stale.length === 0 ? "gen-flag-docs: everything up to date\n" : `gen-flag-docs: updated ${stale.join(", ")}\n`,
);

async function chartFileTargets(): Promise<[string, string][]> {
  const chartDir = fileURLToPath(new URL("../charts/cluster-proxy/", import.meta.url));
  try {
    const wantedFiles = await chartFiles(() => readFile(join(chartDir, "README.md"), "utf8"));
    return [...wantedFiles].map(([rel, content]) => [join(chartDir, rel), content]);
  } catch (err) {
    process.stderr.write(`gen-flag-docs: charts/cluster-proxy: ${(err as Error).message}\n`);
    process.exit(1);
  }
}
