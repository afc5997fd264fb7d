/**
 * `@cluster-proxy/cli/reference`: what the documentation generator (scripts/gen-flag-docs.ts)
 * writes into docs/reference/, the troubleshooting guide and the Helm chart: the flag, CRD and
 * error references and the chart's generated files. Not loaded by the command itself.
 */
export { replaceFlagReference, replaceCrdReference } from "./reference/flag-reference.js";
export {
  errorReferenceMarkdown,
  replaceErrorReference,
  ERROR_REFERENCE_PATH,
  ERROR_TABLE_PATH,
} from "./reference/error-reference.js";
export { chartFiles } from "./reference/chart-files.js";
