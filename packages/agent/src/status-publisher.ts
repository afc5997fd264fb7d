/**
 * Writes the agent's {@link ConnectionCondition} into the status of its own Deployment: one strategic
 * merge PATCH, only changes, one request in flight, retried with a doubling delay; no client library.
 * Design: docs/design/addon-manager.md#what-the-agents-report-the-reason-in-the-agents-own-words
 */
import { readFile } from "node:fs/promises";
import https from "node:https";
import { IdleWaiters, realClock, type Clock, type Logger, type TimerHandle } from "@cluster-proxy/kit";
import type { ConnectionCondition } from "./connect/connection-report.js";
import { apiStatusMessage } from "./kube-status.js";
import { errorMessage } from "@cluster-proxy/errors";

/** Where the kubelet mounts the pod's service account token, CA and namespace. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** Sends one status patch body; rejects with why it failed. */
export type PatchSender = (body: string) => Promise<void>;

export interface StatusPublisherOptions {
  namespace: string;
  deployment: string;
  logger: Logger;
  /** Sends the patch; {@link inClusterPatchSender} of the pod's service account otherwise. */
  send?: PatchSender;
  minIntervalMs?: number;
  retryMs?: number;
  /**
   * The clock of the writes' spacing and retries, and of the condition's times (its `now()` read
   * as Unix ms); default the kit's `realClock`.
   */
  clock?: Clock;
}

/**
 * A sender that PATCHes `/apis/apps/v1/namespaces/<ns>/deployments/<name>/status` at
 * `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT` with the token and CA in `dir` (re-read for
 * every request: projected tokens rotate).
 */
export function inClusterPatchSender(
  namespace: string,
  deployment: string,
  env: NodeJS.ProcessEnv = process.env,
  dir = SERVICE_ACCOUNT_DIR,
  timeoutMs = 10_000,
): PatchSender {
  return async (body) => {
    const host = env.KUBERNETES_SERVICE_HOST;
    const port = Number(env.KUBERNETES_SERVICE_PORT || 443);
    if (!host) throw new Error("KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
    // One after the other, so that a missing service account mount is always reported as such.
    const token = await readFile(`${dir}/token`, "utf8").catch(() => {
      throw new Error(`no service account token in ${dir} (automountServiceAccountToken: false?)`);
    });
    const ca = await readFile(`${dir}/ca.crt`).catch((err: Error) => {
      throw new Error(`cannot read the cluster CA of the service account in ${dir}: ${err.message}`);
    });
    const path = `/apis/apps/v1/namespaces/${encodeURIComponent(namespace)}/deployments/${encodeURIComponent(deployment)}/status`;
    await new Promise<void>((resolve, reject) => {
      const req = https.request(
        {
          hostname: host,
          port,
          path,
          method: "PATCH",
          ca,
          timeout: timeoutMs,
          headers: {
            authorization: `Bearer ${token.trim()}`,
            "content-type": "application/strategic-merge-patch+json",
            accept: "application/json",
            "content-length": Buffer.byteLength(body),
          },
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            if (text.length < 4096) text += chunk;
          });
          res.on("end", () => {
            if (res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300) resolve();
            else reject(new Error(`PATCH ${path}: HTTP ${res.statusCode}: ${apiStatusMessage(text)}`));
          });
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new Error(`PATCH ${path}: no answer within ${timeoutMs} ms`)));
      req.on("error", reject);
      req.end(body);
    });
  };
}

/**
 * The strategic merge patch that sets one condition of a Deployment's status (`transitionAt`:
 * when its status last changed, as far as this writer knows).
 */
export function conditionPatch(condition: ConnectionCondition, now: Date, transitionAt = now): string {
  const time = (d: Date): string => d.toISOString().replace(/\.\d+Z$/, "Z");
  return JSON.stringify({
    status: { conditions: [{ ...condition, lastUpdateTime: time(now), lastTransitionTime: time(transitionAt) }] },
  });
}

const MAX_RETRY_MS = 300_000;

/** Publishes the latest {@link ConnectionCondition}, change by change (see the module comment). */
export class StatusPublisher {
  private readonly send: PatchSender;
  private readonly minIntervalMs: number;
  private readonly retryMs: number;
  private pending: ConnectionCondition | undefined;
  private written = "";
  /** The status last written and since when. */
  private transition: { status: string; at: Date } | undefined;
  private inFlight = false;
  private timer: TimerHandle;
  private lastWriteAt = -Infinity;
  private failures = 0;
  private lastFailure = "";
  private closed = false;
  private readonly clock: Clock;
  /** Waiters for nothing pending (or closed) and nothing in flight. */
  private readonly idle: IdleWaiters;

  constructor(private readonly options: StatusPublisherOptions) {
    this.clock = options.clock ?? realClock;
    this.idle = new IdleWaiters(() => !this.inFlight && (!this.pending || this.closed), this.clock);
    this.send = options.send ?? inClusterPatchSender(options.namespace, options.deployment);
    this.minIntervalMs = options.minIntervalMs ?? 1_000;
    this.retryMs = options.retryMs ?? 5_000;
  }

  /** Publish `condition` unless it is what was last written (the latest call wins). */
  publish(condition: ConnectionCondition): void {
    if (this.closed) return;
    if (key(condition) === this.written && !this.inFlight) {
      this.pending = undefined;
      return;
    }
    this.pending = condition;
    this.kick(Math.max(0, this.lastWriteAt + this.minIntervalMs - this.clock.now()));
  }

  /** Stop writing (a write in flight finishes). */
  close(): void {
    this.closed = true;
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = undefined;
    this.settle();
  }

  /** Resolves once nothing is pending or in flight (for tests and shutdown). */
  async whenIdle(): Promise<void> {
    await this.idle.wait();
  }

  private kick(delayMs: number): void {
    if (this.closed || this.inFlight || this.timer !== undefined) return;
    this.timer = this.clock.setTimeout(() => this.flush(), delayMs);
  }

  private flush(): void {
    this.timer = undefined;
    const condition = this.pending;
    if (this.closed || !condition) return this.settle();
    if (key(condition) === this.written) {
      this.pending = undefined;
      return this.settle();
    }
    this.inFlight = true;
    const o = this.options;
    const now = new Date(this.clock.now());
    const transitionAt = this.transition?.status === condition.status ? this.transition.at : now;
    this.send(conditionPatch(condition, now, transitionAt)).then(
      () => {
        this.written = key(condition);
        this.transition = { status: condition.status, at: transitionAt };
        if (this.failures > 0)
          o.logger.info({ deployment: `${o.namespace}/${o.deployment}` }, "connection status written again");
        this.failures = 0;
        this.lastFailure = "";
        if (this.pending === condition) this.pending = undefined;
        this.done(0);
      },
      (err: unknown) => {
        const message = errorMessage(err);
        this.failures++;
        if (message !== this.lastFailure)
          o.logger.warn(
            { deployment: `${o.namespace}/${o.deployment}`, err: message },
            "cannot write the connection status into the agent's Deployment (the hub will not see why this agent cannot connect)",
          );
        this.lastFailure = message;
        this.done(Math.min(MAX_RETRY_MS, this.retryMs * 2 ** (this.failures - 1)));
      },
    );
  }

  private done(retryInMs: number): void {
    this.inFlight = false;
    this.lastWriteAt = this.clock.now();
    if (this.pending) this.kick(Math.max(retryInMs, this.minIntervalMs));
    else this.settle();
  }

  private settle(): void {
    this.idle.notify();
  }
}

function key(c: ConnectionCondition): string {
  return `${c.status}\u0000${c.reason}\u0000${c.message}`;
}
