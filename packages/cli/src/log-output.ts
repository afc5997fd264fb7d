/**
 * The process logger of long-running commands: pino, JSON lines, written synchronously so nothing
 * is lost when the process exits right after a log line. pino is loaded on first use so
 * `cluster-proxy --help` does not pay for it.
 *
 * Where the lines go follows klog's flags, as the Go binaries read them: standard error by
 * default (`--logtostderr=true`); with `--logtostderr=false` a file (`--log-file`, else
 * `<--log-dir or the temp dir>/<name>.log`) that starts over once it would exceed
 * `--log-file-max-size` MB, plus standard error for lines at or above `--stderrthreshold`
 * (with `--alsologtostderr`: `--alsologtostderrthreshold`).
 */
import { closeSync, fstatSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, klogSeverity, parseLogOptions, type LogOptions, type LogOptionsInput } from "@cluster-proxy/api";
import type { Logger } from "@cluster-proxy/tunnel";

/** Log levels accepted by `--log-level`. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

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

/**
 * A pino logger for `o` with `name` bound to every line. `fd` is standard error's descriptor
 * (tests pass another). Throws a ConfigError naming --log-file / --log-dir when the file cannot
 * be opened.
 */
export async function createLogger(o: LogOptionsInput | string, name: string, fd = 2): Promise<Logger> {
  const options = parseLogOptions(typeof o === "string" ? { logLevel: o } : o);
  const { pino } = await import("pino");
  const level = effectiveLogLevel(options);
  const base = { level, name, base: { pid: process.pid } };
  const file = logFilePath(options, name);
  if (file === undefined) {
    const logger: Logger = pino(base, pino.destination({ dest: fd, sync: true }));
    return logger;
  }
  let target: CappedLogFile;
  try {
    target = new CappedLogFile(file, Math.max(0, options.logFileMaxSize) * 1024 * 1024);
  } catch (err) {
    const flag = options.logFile ? "--log-file" : "--log-dir";
    throw new ConfigError(`${flag}: cannot open log file ${file}: ${(err as Error).message}`, { cause: err });
  }
  const threshold = options.alsologtostderr
    ? klogSeverity(options.alsologtostderrthreshold)
    : klogSeverity(options.stderrthreshold);
  const stderrLevel = SEVERITY_LEVELS[threshold ?? 2] ?? "error";
  const streams = pino.multistream(
    [
      { level: "trace", stream: target },
      { level: stderrLevel, stream: pino.destination({ dest: fd, sync: true }) },
    ],
    { dedupe: false },
  );
  const logger: Logger = pino(base, streams);
  return logger;
}
