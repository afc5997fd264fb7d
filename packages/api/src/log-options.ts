/**
 * klog's flags, which the Go proxy-server and proxy-agent accept (and deployment manifests pass:
 * `-v=3`, `--logtostderr=false --log-file=...`). Ours logs JSON lines with pino; these flags map
 * onto that where they have a meaning for JSON lines, and are accepted without effect where they
 * only shape klog's text headers.
 */
import type { OptionSpec } from "./options.js";

/** klog severities as `--stderrthreshold` takes them (names or numbers). */
export const KLOG_SEVERITIES = ["INFO", "WARNING", "ERROR", "FATAL"] as const;

/** The parsed log flags (part of ServerOptions and AgentOptions). */
export interface LogOptions {
  /** `--log-level` (ours). */
  logLevel: string;
  /** `-v` / `--v`: klog verbosity. */
  v?: number;
  logtostderr?: boolean;
  alsologtostderr?: boolean;
  logFile?: string;
  logDir?: string;
  /** MB; 0 is unlimited. */
  logFileMaxSize?: number;
  stderrthreshold?: string;
  alsologtostderrthreshold?: string;
}

/** Severity (0-3) of a klog severity flag value, or undefined when it is not one. */
export function klogSeverity(value: string): number | undefined {
  const t = value.trim().toUpperCase();
  if (t === "") return 0;
  if (/^[0-3]$/.test(t)) return Number(t);
  const i = (KLOG_SEVERITIES as readonly string[]).indexOf(t);
  return i < 0 ? undefined : i;
}

const SEVERITY_CHOICES = ["", ...KLOG_SEVERITIES, ...KLOG_SEVERITIES.map((s) => s.toLowerCase()), "0", "1", "2", "3"];

const HEADER_NOTE = "accepted, no effect: it shapes klog's text headers, and ours writes JSON lines";

/** klog's flags plus `--log-level`, the same on server and agent. */
export const LOG_OPTION_SPECS: readonly OptionSpec[] = [
  {
    key: "logLevel",
    flag: "log-level",
    kind: "string",
    default: "info",
    choices: ["debug", "info", "warn", "error", "silent"],
    description: "Log level of the JSON log lines",
  },
  {
    key: "v",
    flag: "v",
    short: "v",
    kind: "int",
    default: 4,
    description: "Number for the log level verbosity (klog's -v)",
    goNote:
      "ours has levels, not verbosities: -v 5 or more turns --log-level=info (the default) into debug; below 5 it changes nothing. -v is never --version here",
  },
  {
    key: "logtostderr",
    flag: "logtostderr",
    kind: "boolean",
    default: true,
    goCompatible: true,
    description: "Log to standard error instead of files (false: to --log-file, else --log-dir, else the temp dir)",
  },
  {
    key: "alsologtostderr",
    flag: "alsologtostderr",
    kind: "boolean",
    default: false,
    goCompatible: true,
    description: "Log to standard error as well as files (no effect when --logtostderr=true)",
  },
  {
    key: "alsologtostderrthreshold",
    flag: "alsologtostderrthreshold",
    kind: "string",
    default: "",
    choices: SEVERITY_CHOICES,
    goCompatible: true,
    description:
      "With --alsologtostderr, lines at or above this severity also go to standard error (INFO, WARNING, ERROR, FATAL or 0-3; empty: INFO)",
  },
  {
    key: "stderrthreshold",
    flag: "stderrthreshold",
    kind: "string",
    default: "2",
    choices: SEVERITY_CHOICES,
    goCompatible: true,
    description:
      "When logging to a file, lines at or above this severity also go to standard error (INFO, WARNING, ERROR, FATAL or 0-3; 2 is ERROR)",
  },
  {
    key: "legacyStderrThresholdBehavior",
    flag: "legacy-stderr-threshold-behavior",
    kind: "boolean",
    default: true,
    description: "klog: ignore --stderrthreshold when --logtostderr=true",
    unsupported: "standard error always gets every line when --logtostderr=true",
  },
  {
    key: "logFile",
    flag: "log-file",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Log to this file (appended; no effect when --logtostderr=true)",
  },
  {
    key: "logDir",
    flag: "log-dir",
    kind: "path",
    default: "",
    description: "Write the log file in this directory (no effect when --logtostderr=true or with --log-file)",
    goNote:
      "one file <dir>/<program>.log (proxy-server.log, proxy-agent.log), where klog writes one file per severity and start",
  },
  {
    key: "logFileMaxSize",
    flag: "log-file-max-size",
    kind: "int",
    default: 1800,
    goCompatible: true,
    description:
      "Maximum size of the log file in megabytes; when it is reached the file starts over from empty. 0 is unlimited (no effect when --logtostderr=true)",
  },
  {
    key: "vmodule",
    flag: "vmodule",
    kind: "string",
    default: "",
    description: "klog: comma-separated pattern=N settings for file-filtered logging",
    goNote: "accepted, no effect: ours has no per-file verbosity (use --log-level)",
  },
  {
    key: "addDirHeader",
    flag: "add-dir-header",
    kind: "boolean",
    default: false,
    description: "klog: add the file directory to the header of the log messages",
    goNote: HEADER_NOTE,
  },
  {
    key: "skipHeaders",
    flag: "skip-headers",
    kind: "boolean",
    default: false,
    description: "klog: avoid header prefixes in the log messages",
    goNote: HEADER_NOTE,
  },
  {
    key: "skipLogHeaders",
    flag: "skip-log-headers",
    kind: "boolean",
    default: false,
    description: "klog: avoid headers when opening log files",
    goNote: HEADER_NOTE,
  },
  {
    key: "oneOutput",
    flag: "one-output",
    kind: "boolean",
    default: false,
    description: "klog: only write logs to their native severity level",
    goNote: "accepted, no effect: ours writes each line once to each destination",
  },
  {
    key: "logBacktraceAt",
    flag: "log-backtrace-at",
    kind: "string",
    default: ":0",
    description: "klog: when logging hits line file:N, emit a stack trace",
    goNote: "accepted, no effect: Go source lines do not exist here",
  },
];
