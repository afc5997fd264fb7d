/**
 * Rewrites the flag reference in README.md (between `<!-- flags:begin -->` and
 * `<!-- flags:end -->`) from the option schemas, and the ManagedProxyConfiguration reference
 * (between `<!-- crd:begin -->` and `<!-- crd:end -->`) from the API schema.
 *
 *   node --conditions=source --import tsx scripts/gen-flag-docs.ts [--check] [--readme PATH]
 *
 * With `--check` nothing is written; exits 1 when the README is out of date.
 */
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { replaceCrdReference, replaceFlagReference } from "@cluster-proxy/cli";

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
} catch (err) {
  process.stderr.write(`gen-flag-docs: ${readmePath}: ${(err as Error).message}\n`);
  process.exit(1);
}
if (check) {
  if (wanted !== current) {
    process.stderr.write(`gen-flag-docs: ${readmePath}: the flag reference is out of date; run npm run docs:flags\n`);
    process.exit(1);
  }
  process.stdout.write(`gen-flag-docs: ${readmePath} is up to date\n`);
} else if (wanted !== current) {
  await writeFile(readmePath, wanted);
  process.stdout.write(`gen-flag-docs: updated the flag reference in ${readmePath}\n`);
} else {
  process.stdout.write(`gen-flag-docs: ${readmePath} already up to date\n`);
}
