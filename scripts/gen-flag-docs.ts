/**
 * Writes the generated parts of the documentation (docs/reference/ and the pages that embed a
 * generated table), so that each fact generated from a schema or a catalog has one place:
 *
 * - docs/reference/flags.md, between `<!-- flags:begin -->` and `<!-- flags:end -->`: every
 *   command's flags and the Go flags' status, from the option schemas;
 * - docs/reference/crd.md, between `<!-- crd:begin -->` and `<!-- crd:end -->`: the
 *   ManagedProxyConfiguration reference, from the API schema;
 * - docs/guides/troubleshooting.md, between `<!-- errors:begin -->` and `<!-- errors:end -->`:
 *   the table of error codes, and the whole of docs/reference/errors.md, from the error catalog
 *   (packages/cli/src/reference/error-reference.ts);
 * - the Helm chart's generated files (charts/cluster-proxy: values.schema.json, values.yaml,
 *   crds/, the README's values table), from the values schema (packages/cli/src/reference/chart-files.ts);
 * - docs/reference/metrics.md, between `<!-- metrics:begin -->` and `<!-- metrics:end -->`: every
 *   series of the server's and the agent's metrics registries (scripts/metrics-reference.ts);
 * - docs/reference/performance.md, between `<!-- performance:begin -->` and
 *   `<!-- performance:end -->`, from bench/results (scripts/performance-page.ts);
 * - the whole of docs/reference/sdk.md, the SDK's API reference from its TSDoc
 *   (scripts/sdk-reference.ts).
 *
 *   node --conditions=source --import tsx scripts/gen-flag-docs.ts [--check] [--readme PATH]
 *
 * With `--check` nothing is written; exits 1 when a file is out of date. `--readme PATH` (for
 * tests) regenerates only the flag and CRD sections of PATH, which must hold both pairs of markers.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import {
  ERROR_REFERENCE_PATH,
  ERROR_TABLE_PATH,
  chartFiles,
  errorReferenceMarkdown,
  replaceCrdReference,
  replaceErrorReference,
  replaceFlagReference,
} from "@cluster-proxy/cli/reference";
import { METRICS_PAGE_PATH, replaceMetricsSection } from "./metrics-reference.js";
import { PERFORMANCE_PAGE_PATH, readBenchResults, replacePerformanceSection } from "./performance-page.js";
import { SDK_REFERENCE_PATH, sdkReferenceMarkdown } from "./sdk-reference.js";
import { errorMessage } from "@cluster-proxy/errors";

/** Pages with a generated section, relative to the repository root. */
const FLAG_REFERENCE_PATH = "docs/reference/flags.md";
const CRD_REFERENCE_PATH = "docs/reference/crd.md";

const root = fileURLToPath(new URL("..", import.meta.url));
const args = process.argv.slice(2);
const check = args.includes("--check");
const readmeFlag = args.indexOf("--readme");
const readmePath = readmeFlag >= 0 ? args[readmeFlag + 1] : undefined;
const unknown = args.filter(
  (a, i) => a !== "--check" && a !== "--readme" && !(readmeFlag >= 0 && i === readmeFlag + 1),
);
if (unknown.length > 0 || (readmeFlag >= 0 && !readmePath)) {
  process.stderr.write(`gen-flag-docs: ${unknown[0] ?? "--readme"}: unknown argument (use --check, --readme PATH)\n`);
  process.exit(2);
}

/** Each file with what it should hold, given what it holds now. */
type Target = [path: string, wanted: (current: string) => string | Promise<string>];

const targets: Target[] = readmePath
  ? [[readmePath, (text) => replaceCrdReference(replaceFlagReference(text))]]
  : [
      [join(root, FLAG_REFERENCE_PATH), replaceFlagReference],
      [join(root, CRD_REFERENCE_PATH), replaceCrdReference],
      [join(root, ERROR_TABLE_PATH), replaceErrorReference],
      [join(root, ERROR_REFERENCE_PATH), () => errorReferenceMarkdown()],
      [join(root, METRICS_PAGE_PATH), replaceMetricsSection],
      [
        join(root, PERFORMANCE_PAGE_PATH),
        async (text) => replacePerformanceSection(text, await readBenchResults(join(root, "bench", "results"))),
      ],
      [join(root, SDK_REFERENCE_PATH), () => sdkReferenceMarkdown(root)],
      ...(await chartFileTargets()),
    ];

const stale: string[] = [];
for (const [path, wanted] of targets) {
  const current = await readFile(path, "utf8").catch((err: Error) => {
    // A wholly generated file may be missing (it is written); a page with markers may not.
    if (readmePath || (path !== join(root, ERROR_REFERENCE_PATH) && path !== join(root, SDK_REFERENCE_PATH)))
      fail(`cannot read ${path}: ${err.message}`);
    return "";
  });
  let content: string;
  try {
    content = await wanted(current);
  } catch (err) {
    fail(`${path}: ${errorMessage(err)}`);
  }
  if (current === content) continue;
  stale.push(relative(root, path));
  if (!check) await writeFile(path, content);
}
if (check && stale.length > 0) {
  process.stderr.write(`gen-flag-docs: out of date (run npm run docs:flags): ${stale.join(", ")}\n`);
  process.exit(1);
}
process.stdout.write(
  stale.length === 0 ? "gen-flag-docs: everything up to date\n" : `gen-flag-docs: updated ${stale.join(", ")}\n`,
);

function fail(message: string): never {
  process.stderr.write(`gen-flag-docs: ${message}\n`);
  process.exit(1);
}

async function chartFileTargets(): Promise<Target[]> {
  const chartDir = join(root, "charts", "cluster-proxy");
  try {
    const wantedFiles = await chartFiles(() => readFile(join(chartDir, "README.md"), "utf8"));
    return [...wantedFiles].map(([rel, content]): Target => [join(chartDir, rel), () => content]);
  } catch (err) {
    fail(`charts/cluster-proxy: ${errorMessage(err)}`);
  }
}
