/** A child process a harness started, and waiting for it to become ready. */
import type { ChildProcess } from "node:child_process";
import { waitFor } from "./waits.js";
import { errorMessage } from "@cluster-proxy/errors";

/** A process started by {@link Harness.spawnProc}, killed by PID when the harness closes. */
export interface Proc {
  name: string;
  child: ChildProcess;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * {@link waitFor} for a process to become ready: fails at once if it exits first, and either way
 * the error carries what the process printed (read when it fails, not when the wait started).
 */
export async function waitForProc(
  proc: Proc,
  what: string,
  check: () => Promise<boolean>,
  timeoutMs?: number,
): Promise<void> {
  const output = (): string => proc.output().slice(-4000);
  let died: Error | undefined;
  const exited = proc.exited.then((code) => {
    throw (died = new Error(`${proc.name} exited (${code}) while waiting for ${what}:\n${output()}`));
  });
  exited.catch(() => undefined);
  try {
    await Promise.race([waitFor(what, check, ...(timeoutMs !== undefined ? [timeoutMs] : [])), exited]);
  } catch (err) {
    if (err === died) throw err;
    throw new Error(`${errorMessage(err)}\n${proc.name} output:\n${output()}`, { cause: err });
  }
}
