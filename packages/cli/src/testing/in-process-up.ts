/**
 * Test-only: `cluster-proxy up` run in the test's own process, with its demo agents handed over
 * through the {@link CliContext.upAgents} seam, so a test can stop a cluster's agent and start it
 * again.
 */
import { EventEmitter } from "node:events";
import type { CliContext, UpAgents } from "../cli-context.js";
import { runCli } from "../program.js";

/** What `up` prints once everything is ready. */
export const UP_READY_LINE = "Running; press Ctrl-C";

/** A running in-process `up`. */
export interface InProcessUp {
  /** Everything up printed so far (stdout and stderr). */
  output(): string;
  /** Its demo agents (the test seam). */
  agents: UpAgents;
  /** Signal up to stop (SIGTERM unless given) and resolve with its exit status. */
  stop(signal?: "SIGINT" | "SIGTERM"): Promise<number>;
}

/** up ended (or never got ready) before its ready screen: its exit status, if any, and its output. */
export class UpNotReady extends Error {
  constructor(
    readonly code: number | undefined,
    readonly output: string,
  ) {
    super(
      code === undefined
        ? `up printed no ready screen in time:\n${output}`
        : `up exited (${code}) before its ready screen:\n${output}`,
    );
  }
}

/**
 * Runs `cluster-proxy up <args>` in this process and resolves once its ready screen is printed
 * and its agents were handed over. Rejects with {@link UpNotReady} when up exits first, or when it
 * is not ready within `timeoutMs` (then it is stopped first).
 */
export async function startUpInProcess(args: readonly string[], timeoutMs = 60_000): Promise<InProcessUp> {
  const out: string[] = [];
  const signals = new EventEmitter();
  const printed = new EventEmitter();
  let agents: UpAgents | undefined;
  const write = (t: string): void => {
    out.push(t);
    printed.emit("text");
  };
  const ctx: CliContext = {
    stdout: write,
    stderr: write,
    env: {},
    signals,
    colors: false,
    upAgents: (a) => (agents = a),
  };
  const running = runCli(["up", ...args], ctx);
  const output = (): string => out.join("");
  const ready = new Promise<UpAgents>((resolve) => {
    const check = (): void => {
      if (agents && output().includes(UP_READY_LINE)) {
        printed.off("text", check);
        resolve(agents);
      }
    };
    printed.on("text", check);
    check();
  });
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), timeoutMs)));
  try {
    const first = await Promise.race([ready, running, timedOut]);
    if (first === "timeout") {
      signals.emit("SIGTERM");
      await running;
      throw new UpNotReady(undefined, output());
    }
    if (typeof first === "number") throw new UpNotReady(first, output());
    return {
      output,
      agents: first,
      stop: (signal = "SIGTERM") => {
        signals.emit(signal);
        return running;
      },
    };
  } finally {
    clearTimeout(timer);
  }
}
