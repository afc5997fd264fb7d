/**
 * Recognising "address already in use" failures so they can be reported with the flag that
 * chooses the port, instead of as a bare `EADDRINUSE`.
 */

import { ClusterProxyError, ErrorCodes, type OptionSpec } from "@cluster-proxy/api";

/** The port and address of a listen error, when it is an address-in-use error. */
export interface PortInUse {
  port: number;
  address: string;
}

/** A port a command listens on is taken; the message names the port and the flag that chose it. */
export class PortInUseError extends ClusterProxyError<typeof ErrorCodes.portInUse> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.portInUse, message, options);
    this.name = "PortInUseError";
  }
}

type ListenErrno = NodeJS.ErrnoException & { port?: unknown; address?: unknown };

/**
 * If `err` or an error in its `cause` chain is an `EADDRINUSE`/`EACCES` listen error (node's
 * errno error, which names the port), the port and address it is about; otherwise undefined.
 */
export function portInUse(err: unknown): PortInUse | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    const { code, port, address } = e as ListenErrno;
    if ((code === "EADDRINUSE" || code === "EACCES") && typeof port === "number")
      return { port, address: typeof address === "string" ? address : "" };
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
