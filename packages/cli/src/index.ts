/**
 * @cluster-proxy/cli: the `cluster-proxy` command (server, agent, certs, up), exposed for
 * in-process use by tests and scripts.
 */
export { runCli, buildProgram, cliVersion } from "./program.js";
export { EXIT_FAILURE, EXIT_STATUS_BY_CODE, EXIT_USAGE, exitStatusOf } from "./exit-status.js";
export { processContext, CommandFailure, type CliContext, type UpAgents } from "./cli-context.js";
export { addOptionSpecs, commanderOption, optionHelpText, resolveCommandOptions } from "./option-flags.js";
export { runUntilSignalled, SHUTDOWN_SIGNALS, type SignalSource, type ShutdownStages } from "./shutdown-signals.js";
export { upPorts, runUp } from "./up-command.js";
export {
  flagReferenceMarkdown,
  replaceFlagReference,
  replaceCrdReference,
  FLAGS_BEGIN,
  FLAGS_END,
} from "./flag-reference.js";
export { crdReferenceMarkdown, CRD_BEGIN, CRD_END } from "./crd-reference.js";
export {
  errorReferenceMarkdown,
  errorTableMarkdown,
  replaceErrorReference,
  ERRORS_BEGIN,
  ERRORS_END,
  ERROR_REFERENCE_PATH,
  ERROR_TABLE_PATH,
} from "./error-reference.js";
export { startSampleService, type SampleService } from "./sample-service.js";
export { NODE_FLAGS, SHEBANG, missingNodeFlags, nodeFlagsFor } from "./node-flags.js";
export { PortInUseError, portInUse, portConflictMessage, type PortInUse } from "./port-conflicts.js";
export { CHART_GENERATED, chartFiles, valuesSchemaJson, valuesYaml, valuesTableMarkdown } from "./chart-files.js";
