/**
 * klog's flags, which the Go proxy-server and proxy-agent accept (and deployment manifests pass:
 * `-v=3`, `--logtostderr=false --log-file=...`). Ours logs JSON lines with pino; these flags map
 * onto that where they have a meaning for JSON lines, and are accepted without effect where they
 * only shape klog's text headers.
 */
import { defineOptions, opt, parseOptions, type OptionsInputOf, type OptionsOf } from "./option-schema.js";

/** klog severities as `--stderrthreshold` takes them (names or numbers). */
export const KLOG_SEVERITIES = ["INFO", "WARNING", "ERROR", "FATAL"] as const;

/** Severity (0-3) of a klog severity flag value, or undefined when it is not one. */
export function klogSeverity(value: string): number | undefined {
  const t = value.trim().toUpperCase();
  if (t === "") return 0;
  if (/^[0-3]$/.test(t)) return Number(t);
  const i = (KLOG_SEVERITIES as readonly string[]).indexOf(t);
  return i < 0 ? undefined : i;
}

const SEVERITY_CHOICES: [string, ...string[]] = [
  "",
  ...KLOG_SEVERITIES,
  ...KLOG_SEVERITIES.map((s) => s.toLowerCase()),
  "0",
  "1",
  "2",
  "3",
];

const HEADER_NOTE =
  "accepted, no effect: it shapes klog's text headers, and ours writes JSON lines or pino's text (--log-format)";

/** The forms of `--log-format` (empty: text on a terminal, JSON otherwise). */
export const LOG_FORMATS = ["", "text", "json"] as const;
/** `--log-format`, shared by every command that logs. */
export const LOG_FORMAT_FIELD = opt.choice(LOG_FORMATS, "", {
  flag: "log-format",
  env: "CLUSTER_PROXY_LOG_FORMAT",
  description:
    "Form of the log lines on standard error: text (one readable line each) or json (one JSON object each). Empty: text when standard error is a terminal, json otherwise (log files are always json; the container image sets json)",
});

/** klog's flags plus `--log-level` and `--log-format`, the same on server and agent (fields of their schemas). */
export const LOG_OPTION_FIELDS = {
  logLevel: opt.choice(["debug", "info", "warn", "error", "silent"] as const, "info", {
    flag: "log-level",
    description: "Log level of the log lines",
  }),
  logFormat: LOG_FORMAT_FIELD,
  v: opt.int(4, {
    flag: "v",
    short: "v",
    description: "Number for the log level verbosity (klog's -v)",
    goNote:
      "ours has levels, not verbosities: -v 5 or more turns --log-level=info (the default) into debug; below 5 it changes nothing. -v is never --version here",
  }),
  logtostderr: opt.boolean(true, {
    flag: "logtostderr",
    goCompatible: true,
    description: "Log to standard error instead of files (false: to --log-file, else --log-dir, else the temp dir)",
  }),
  alsologtostderr: opt.boolean(false, {
    flag: "alsologtostderr",
    goCompatible: true,
    description: "Log to standard error as well as files (no effect when --logtostderr=true)",
  }),
  alsologtostderrthreshold: opt.choice(SEVERITY_CHOICES, "", {
    flag: "alsologtostderrthreshold",
    goCompatible: true,
    description:
      "With --alsologtostderr, lines at or above this severity also go to standard error (INFO, WARNING, ERROR, FATAL or 0-3; empty: INFO)",
  }),
  stderrthreshold: opt.choice(SEVERITY_CHOICES, "2", {
    flag: "stderrthreshold",
    goCompatible: true,
    description:
      "When logging to a file, lines at or above this severity also go to standard error (INFO, WARNING, ERROR, FATAL or 0-3; 2 is ERROR)",
  }),
  legacyStderrThresholdBehavior: opt.boolean(true, {
    flag: "legacy-stderr-threshold-behavior",
    description: "klog: ignore --stderrthreshold when --logtostderr=true",
    unsupported: "standard error always gets every line when --logtostderr=true",
  }),
  logFile: opt.path("", {
    flag: "log-file",
    goCompatible: true,
    description: "Log to this file (appended; no effect when --logtostderr=true)",
  }),
  logDir: opt.path("", {
    flag: "log-dir",
    description: "Write the log file in this directory (no effect when --logtostderr=true or with --log-file)",
    goNote:
      "one file <dir>/<program>.log (proxy-server.log, proxy-agent.log), where klog writes one file per severity and start",
  }),
  logFileMaxSize: opt.int(1800, {
    flag: "log-file-max-size",
    goCompatible: true,
    description:
      "Maximum size of the log file in megabytes; when it is reached the file starts over from empty. 0 is unlimited (no effect when --logtostderr=true)",
  }),
  vmodule: opt.string("", {
    flag: "vmodule",
    description: "klog: comma-separated pattern=N settings for file-filtered logging",
    goNote: "accepted, no effect: ours has no per-file verbosity (use --log-level)",
  }),
  addDirHeader: opt.boolean(false, {
    flag: "add-dir-header",
    description: "klog: add the file directory to the header of the log messages",
    goNote: HEADER_NOTE,
  }),
  skipHeaders: opt.boolean(false, {
    flag: "skip-headers",
    description: "klog: avoid header prefixes in the log messages",
    goNote: HEADER_NOTE,
  }),
  skipLogHeaders: opt.boolean(false, {
    flag: "skip-log-headers",
    description: "klog: avoid headers when opening log files",
    goNote: HEADER_NOTE,
  }),
  oneOutput: opt.boolean(false, {
    flag: "one-output",
    description: "klog: only write logs to their native severity level",
    goNote: "accepted, no effect: ours writes each line once to each destination",
  }),
  logBacktraceAt: opt.string(":0", {
    flag: "log-backtrace-at",
    description: "klog: when logging hits line file:N, emit a stack trace",
    goNote: "accepted, no effect: Go source lines do not exist here",
  }),
};

/** The parsed log flags (part of ServerOptions and AgentOptions). */
export type LogOptions = OptionsOf<typeof LOG_OPTION_FIELDS>;
/** Log options as a caller may give them (what is left out takes its default). */
export type LogOptionsInput = OptionsInputOf<typeof LOG_OPTION_FIELDS>;

const logOptionsSchema = defineOptions(LOG_OPTION_FIELDS);

/**
 * The log options of a component's options (other options are ignored), validated, with the
 * defaults applied. Throws a ConfigError naming every bad log flag.
 */
export function parseLogOptions(input: unknown): LogOptions {
  return parseOptions(logOptionsSchema, input);
}
