/**
 * The controller layer: one reconciler with its own work queue of typed keys. Each reconcile is
 * counted and timed ({@link ReconcileMetrics}); failures are logged once per attempt (routine ones,
 * a 409 Conflict because the cache lagged behind a write, at debug, others as a warning with the
 * retry delay) and retried by the queue, except a {@link TerminalError}, which is logged and left
 * until the key is queued again.
 */
import type { Counter, Histogram } from "prom-client";
import { isConflict } from "./kube-api.js";
import type { Logger } from "@cluster-proxy/kit";
import { TerminalError, WorkQueue, type ReconcileResult } from "./work-queue.js";
import { errorMessage } from "@cluster-proxy/errors";

/** Counts reconciles by result (`success`, `error`, `terminal`) and times them. */
export class ReconcileMetrics {
  constructor(
    private readonly reconciles: Counter,
    private readonly seconds: Histogram,
  ) {}

  /** Run one reconcile, counting it by result and timing it. */
  async measure(reconcile: () => Promise<ReconcileResult>): Promise<ReconcileResult> {
    const end = this.seconds.startTimer();
    try {
      const result = await reconcile();
      this.reconciles.inc({ result: "success" });
      return result;
    } catch (err) {
      this.reconciles.inc({ result: err instanceof TerminalError ? "terminal" : "error" });
      throw err;
    } finally {
      end();
    }
  }
}

/**
 * What a controller drives: bring what key `key` names to its desired state (controller-runtime's
 * `reconcile.Reconciler`). A rejection is retried with backoff, a {@link TerminalError} is not.
 */
export interface Reconciler<K extends string = string> {
  reconcile(key: K): Promise<ReconcileResult>;
}

/** What a controller is: its reconcile of one key and how its log lines name the work. */
export interface ControllerSpec<K extends string> extends Reconciler<K> {
  /** What the log lines call one reconcile, e.g. `"addon reconcile"`. */
  readonly what: string;
  /** The log fields naming `key`, e.g. `{ configuration: key }`. */
  readonly logFields: (key: K) => Record<string, unknown>;
}

/** One reconciler and its queue of `K` keys. */
export class Controller<K extends string> {
  private readonly queue: WorkQueue<K>;

  constructor(spec: ControllerSpec<K>, metrics: ReconcileMetrics, log: Logger) {
    this.queue = new WorkQueue<K>(
      (key) => metrics.measure(() => spec.reconcile(key)),
      (key, err, retryInMs, routine) => {
        const fields = { ...spec.logFields(key), err: errorMessage(err) };
        if (retryInMs === undefined) log.warn(fields, `${spec.what} refused; not retried until it changes`);
        else if (routine) log.debug({ ...fields, retryInMs }, `${spec.what} failed; retrying`);
        else log.warn({ ...fields, retryInMs }, `${spec.what} failed; retrying`);
      },
      { isRoutine: isConflict },
    );
  }

  /** Queue `key` (once, however often it is added before it runs). */
  add(key: K): void {
    this.queue.add(key);
  }

  /** Reconcile queued keys until `signal` aborts. */
  run(signal: AbortSignal): Promise<void> {
    return this.queue.run(signal);
  }
}
