/**
 * The process logger of long-running commands: pino, synchronous, loaded on first use; text on a
 * terminal, JSON elsewhere; where lines go follows klog's flags.
 * Design: docs/design/decisions.md#process-logs-pino-written-synchronously-klogs-flags
 */
import { closeSync, fstatSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isatty } from "node:tty";
import type { DestinationStream, pino as pinoFactory } from "pino";
import { ConfigError, klogSeverity, parseLogOptions, type LogOptions, type LogOptionsInput } from "@cluster-proxy/api";
import { withoutOpensslInternals } from "@cluster-proxy/tunnel";
import { type Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** pino level of each klog severity (INFO includes klog's verbose lines, our debug). */
const SEVERITY_LEVELS = ["debug", "warn", "error", "fatal"] as const;

/** The level the logger runs at: `--log-level`, raised to debug by `-v` 5 or more when left at info. */
export function effectiveLogLevel(o: Pick<LogOptions, "logLevel" | "v">): string {
  return o.logLevel === "info" && o.v >= 5 ? "debug" : o.logLevel;
}

/** The file `--logtostderr=false` writes to, or undefined when logging to standard error. */
export function logFilePath(o: LogOptionsInput, name: string): string | undefined {
  if (o.logtostderr !== false) return undefined;
  if (o.logFile) return o.logFile;
  return join(o.logDir || tmpdir(), `${name}.log`);
}

/**
 * An append-only log file that starts over from empty when the next line would take it past
 * `maxBytes` (0: unlimited), as klog's --log-file-max-size bounds its files.
 */
export class CappedLogFile {
  private readonly fd: number;
  private size: number;

  constructor(
    readonly path: string,
    private readonly maxBytes: number,
  ) {
    this.fd = openSync(path, "a");
    this.size = fstatSync(this.fd).size;
  }

  write(line: string): boolean {
    const bytes = Buffer.byteLength(line);
    if (this.maxBytes > 0 && this.size + bytes > this.maxBytes && this.size > 0) {
      ftruncateSync(this.fd, 0);
      this.size = 0;
    }
    writeSync(this.fd, line);
    this.size += bytes;
    return true;
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** The form of the lines written to `fd`: `--log-format`, else text on a terminal and JSON otherwise. */
export function logFormatFor(format: string | undefined, fd: number): "text" | "json" {
  if (format === "text" || format === "json") return format;
  return isatty(fd) ? "text" : "json";
}

/** Fields whose string values are error texts (cleaned of OpenSSL internals). */
const ERROR_FIELDS = ["err", "error", "reason", "cause"];

/** pino's `formatters.log`: error texts without library internals. */
export function cleanLogFields(fields: Record<string, unknown>): Record<string, unknown> {
  let out = fields;
  for (const key of ERROR_FIELDS) {
    const v = fields[key];
    if (typeof v !== "string") continue;
    const clean = withoutOpensslInternals(v);
    if (clean !== v) out = { ...out, [key]: clean };
  }
  return out;
}

type Pino = typeof pinoFactory;

/** The destination of the lines for standard error (`fd`), in `format`. */
async function standardError(pino: Pino, fd: number, format: "text" | "json"): Promise<DestinationStream> {
  const out = pino.destination({ dest: fd, sync: true });
  if (format === "json") return out;
  const { prettyFactory } = await import("pino-pretty");
  const pretty = prettyFactory({
    colorize: isatty(fd) && !("NO_COLOR" in process.env),
    singleLine: true,
    translateTime: "HH:MM:ss.l",
    ignore: "pid,hostname",
    // Our error fields are message strings: keep them on the line.
    errorLikeObjectKeys: [],
  });
  return { write: (line: string) => void out.write(pretty(line)) };
}

/**
 * A pino logger for `o` with `name` bound to every line. `fd` is standard error's descriptor
 * (tests pass another). Throws a ConfigError naming --log-file / --log-dir when the file cannot
 * be opened.
 */
export async function createLogger(
  o: (LogOptionsInput & { logFormat?: string }) | string,
  name: string,
  fd = 2,
): Promise<Logger> {
  const options = parseLogOptions(typeof o === "string" ? { logLevel: o } : o);
  // The CommonJS module's exports object (also what the agent's bundle gives; it keeps no named exports).
  const { default: pino } = await import("pino");
  const level = effectiveLogLevel(options);
  const base = { level, name, base: { pid: process.pid }, formatters: { log: cleanLogFields } };
  const format = logFormatFor(options.logFormat, fd);
  const file = logFilePath(options, name);
  if (file === undefined) {
    const logger: Logger = pino(base, await standardError(pino, fd, format));
    return logger;
  }
  let target: CappedLogFile;
  try {
    target = new CappedLogFile(file, Math.max(0, options.logFileMaxSize) * 1024 * 1024);
  } catch (err) {
    const flag = options.logFile ? "--log-file" : "--log-dir";
    throw new ConfigError(`${flag}: cannot open log file ${file}: ${errorMessage(err)}`, { cause: err });
  }
  const threshold = options.alsologtostderr
    ? klogSeverity(options.alsologtostderrthreshold)
    : klogSeverity(options.stderrthreshold);
  const stderrLevel = SEVERITY_LEVELS[threshold ?? 2] ?? "error";
  const streams = pino.multistream(
    [
      { level: "trace", stream: target },
      { level: stderrLevel, stream: await standardError(pino, fd, format) },
    ],
    { dedupe: false },
  );
  const logger: Logger = pino(base, streams);
  return logger;
}
