/** Test-only: a {@link Logger} that records every line (its children record into the same list). */
import type { Logger } from "../logger.js";

/** One recorded line. */
export interface LoggedLine {
  level: "debug" | "info" | "warn" | "error";
  obj: Record<string, unknown>;
  msg?: string;
}

/** A logger whose lines (and its children's) are kept in `lines`, in order. */
export function recordingLogger(): Logger & { lines: LoggedLine[] } {
  const lines: LoggedLine[] = [];
  const at =
    (level: LoggedLine["level"]) =>
    (obj: Record<string, unknown>, msg?: string): void =>
      void lines.push(msg === undefined ? { level, obj } : { level, obj, msg });
  const logger = {
    lines,
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
    child: () => logger,
  };
  return logger;
}
