/**
 * Recognising "address already in use" failures so they can be reported with the flag that
 * chooses the port, instead of as a bare `EADDRINUSE`.
 */

import type { OptionSpec } from "@cluster-proxy/api";

/** The port and address of a listen error, when it is an address-in-use error. */
export interface PortInUse {
  port: number;
  address: string;
}

function asErrno(err: unknown): (NodeJS.ErrnoException & { port?: unknown; address?: unknown }) | undefined {
  return err instanceof Error ? err : undefined;
}

/**
 * If `err` (or an error in its `cause` chain) is an `EADDRINUSE`/`EACCES` listen error, the
 * port and address it is about; otherwise undefined.
 */
export function portInUse(err: unknown): PortInUse | undefined {
  for (let e = asErrno(err), depth = 0; e && depth < 5; e = asErrno(e.cause), depth++) {
    const byCode = e.code === "EADDRINUSE" || e.code === "EACCES";
    if (byCode && typeof e.port === "number")
      return { port: e.port, address: typeof e.address === "string" ? e.address : "" };
    // Errors re-thrown with the listen error's text (e.g. a ConfigError naming the flag).
    const m = /\b(?:EADDRINUSE|EACCES)\b.*?(?:\s(\S+):|:)(\d+)\s*$/.exec(e.message);
    if ((byCode || /\b(?:EADDRINUSE|EACCES)\b/.test(e.message)) && m)
      return { port: Number(m[2]), address: m[1] ?? "" };
  }
  return undefined;
}

/**
 * The message for a port that is already taken: names the port and the flag that chose it.
 */
export function portConflictMessage(err: unknown, specs: readonly OptionSpec[], options: object): string | undefined {
  const inUse = portInUse(err);
  if (!inUse) return undefined;
  const values = options as Record<string, unknown>;
  const spec = specs.find((s) => s.kind === "port" && values[s.key] === inUse.port);
  const where = inUse.address ? ` on ${inUse.address}` : "";
  const flag = spec ? ` (--${spec.flag})` : "";
  return `port ${inUse.port}${flag}${where} is already in use${spec ? `: free it or choose another with --${spec.flag}` : ""}`;
}
