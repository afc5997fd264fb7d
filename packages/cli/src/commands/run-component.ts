/**
 * How the CLI runs every long-running component (proxy-server, proxy-agent, addon manager,
 * gateway): start it (a port in use or a bad flag becomes the message the user reads), log that it
 * started, and on the first SIGTERM/SIGINT stop it gracefully (drain, when it has a drain, then
 * close); a second signal closes it at once. The components own what stopping means; the commands
 * only say how to build one.
 */
import type { OptionSpec } from "@cluster-proxy/api";
import type { Component, Logger } from "@cluster-proxy/kit";
import type { CliContext } from "../cli-context.js";
import { startComponent } from "./option-command.js";
import { runUntilSignalled } from "./shutdown-signals.js";

/** What {@link runComponent} needs besides the component. */
export interface RunOptions<Started> {
  /** The component's name in log lines and errors, e.g. `proxy-agent`. */
  name: string;
  logger: Logger;
  /** The flag table and values, to name the flag of a port in use. */
  specs: readonly OptionSpec[];
  options: object;
  /** Fields of the "started" log line. */
  started?(result: Started): Record<string, unknown>;
  /** Resolves when the component can no longer run (e.g. lost leadership): stop, exit status 1. */
  lost?: Promise<unknown>;
}

/** Run `component` until a signal (or `lost`) stops it; resolves with the exit status. */
export async function runComponent<Started>(
  ctx: CliContext,
  component: Component<Started>,
  run: RunOptions<Started>,
): Promise<number> {
  const { logger, name } = run;
  let result: Started | undefined;
  await startComponent(
    name,
    { start: async () => (result = await component.start()), close: () => component.close() },
    run.specs,
    run.options,
  );
  logger.info(result !== undefined && run.started ? run.started(result) : {}, `${name} started`);
  return superviseComponent(ctx, component, { name, logger, ...(run.lost ? { lost: run.lost } : {}) });
}

/** What {@link superviseComponent} needs besides the running component. */
export interface SuperviseOptions {
  name: string;
  logger: Logger;
  /** Resolves when the component can no longer run: stop, exit status 1. */
  lost?: Promise<unknown>;
  /** Stop as if signalled, exit status 0 (e.g. `up --exit-after-ready`). */
  stopNow?: AbortSignal;
  /** Tell the user on the terminal too (`up`: its logs may go to a file). */
  announce?(what: "stopping" | "stopped"): void;
}

/**
 * Until a signal (or `lost`, or `stopNow`) comes: then drain (when the component has a drain) and
 * close it; a second signal closes it at once. Resolves with the exit status. For a component
 * already started (runComponent starts it; `up` starts its parts itself).
 */
export function superviseComponent(
  ctx: CliContext,
  component: Pick<Component<unknown>, "drain" | "close">,
  run: SuperviseOptions,
): Promise<number> {
  const { logger, name } = run;
  let lost = false;
  const ended = new AbortController();
  void run.lost?.then(() => {
    lost = true;
    logger.warn({}, `${name} can no longer run: stopping`);
    ended.abort();
  });
  if (run.stopNow?.aborted) ended.abort();
  else run.stopNow?.addEventListener("abort", () => ended.abort(), { once: true });
  return runUntilSignalled(
    ctx.signals,
    {
      graceful: async (signal) => {
        logger.info({ signal }, `${name} stopping (a second signal stops it at once)`);
        run.announce?.("stopping");
        if (component.drain) await component.drain();
        await component.close();
        logger.info({}, `${name} stopped`);
        run.announce?.("stopped");
        return lost ? 1 : 0;
      },
      forced: async (signal) => {
        logger.warn({ signal }, "second signal: closing now");
        await component.close();
        return 1;
      },
      onError: (err, stage) => logger.error({ err, stage }, "shutdown failed"),
    },
    ended.signal,
  );
}
