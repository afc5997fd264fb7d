/**
 * The process logger of long-running commands: pino, JSON lines to stderr, written
 * synchronously so nothing is lost when the process exits right after a log line. pino is
 * loaded on first use so `cluster-proxy --help` does not pay for it.
 */
import type { Logger } from "@cluster-proxy/tunnel";

/** Log levels accepted by `--log-level`. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

/**
 * A pino logger at `level` writing JSON lines to `fd` (default 2, stderr), with `name` bound
 * to every line.
 */
export async function createLogger(level: string, name: string, fd = 2): Promise<Logger> {
  const { pino } = await import("pino");
  const logger: Logger = pino({ level, name, base: { pid: process.pid } }, pino.destination({ dest: fd, sync: true }));
  return logger;
}
