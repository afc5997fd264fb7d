/**
 * Two-stage shutdown on SIGTERM/SIGINT: the first signal starts a graceful stop, a second
 * signal (while the first is still running) forces a quick one.
 */

/** Something that emits process signals (the `process` object, or an EventEmitter in tests). */
export interface SignalSource {
  on(event: NodeJS.Signals, listener: () => void): unknown;
  off(event: NodeJS.Signals, listener: () => void): unknown;
}

/** The two stages; each resolves with the process exit code. */
export interface ShutdownStages {
  /** Run on the first signal: stop gracefully. */
  graceful(signal: NodeJS.Signals): Promise<number>;
  /** Run on a second signal while `graceful` has not finished: stop at once. */
  forced(signal: NodeJS.Signals): Promise<number>;
  /** Told about a failure of either stage (the exit code is then 1). */
  onError?(err: unknown, stage: "graceful" | "forced"): void;
}

/** Signals that stop a long-running command. */
export const SHUTDOWN_SIGNALS: readonly NodeJS.Signals[] = ["SIGTERM", "SIGINT"];

/**
 * Wait for a shutdown signal and run the stages; resolves with the exit code of the stage that
 * finished the shutdown. Listeners are removed before it resolves. `abort` ends the wait as if
 * the first signal had arrived (used by `up --exit-after-ready`).
 */
export function runUntilSignalled(source: SignalSource, stages: ShutdownStages, abort?: AbortSignal): Promise<number> {
  return new Promise<number>((resolve) => {
    let stage: "waiting" | "graceful" | "forced" | "done" = "waiting";
    const finish = (code: number): void => {
      if (stage === "done") return;
      stage = "done";
      for (const sig of SHUTDOWN_SIGNALS) source.off(sig, handlers.get(sig)!);
      abort?.removeEventListener("abort", onAbort);
      resolve(code);
    };
    const run = (which: "graceful" | "forced", signal: NodeJS.Signals): void => {
      stage = which;
      stages[which](signal).then(finish, (err: unknown) => {
        stages.onError?.(err, which);
        finish(1);
      });
    };
    const onSignal = (signal: NodeJS.Signals): void => {
      if (stage === "waiting") run("graceful", signal);
      else if (stage === "graceful") run("forced", signal);
    };
    const handlers = new Map(SHUTDOWN_SIGNALS.map((sig) => [sig, () => onSignal(sig)] as const));
    const onAbort = (): void => onSignal("SIGTERM");
    for (const [sig, handler] of handlers) source.on(sig, handler);
    if (abort?.aborted) onAbort();
    else abort?.addEventListener("abort", onAbort, { once: true });
  });
}
