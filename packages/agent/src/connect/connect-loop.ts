/**
 * The agent's connect loop (konnectivity's ClientSet sync): one attempt at a time while the
 * {@link ServerTargets} want another tunnel, backoff after failures, stopped by drain or close.
 * Design: docs/design/protocol.md#23-server-count-and-ha-behind-a-load-balancer
 */
import { Backoff, type Clock, type TimerHandle } from "@cluster-proxy/kit";
import { serverIsShedding } from "@cluster-proxy/tunnel";
import type { ServerTargets } from "./server-targets.js";

/** How one connect attempt ended (errors are thrown). */
export type AttemptResult = "connected" | "duplicate" | "closed";

/** What a failed attempt left behind, for the agent's log and status. */
export interface AttemptFailure {
  err: unknown;
  /** The delay before the next attempt. */
  retryInMs: number;
  /** Failures in a row, this one included. */
  failures: number;
  /** The server said it is shedding load. */
  shedding: boolean;
}

export interface ConnectLoopOptions {
  targets: ServerTargets;
  /** Opens one tunnel (the tunnel opener); rejects when the attempt failed. */
  attempt: () => Promise<AttemptResult>;
  /** --sync-interval: the pause between checks and the first backoff (ms). */
  syncIntervalMs: number;
  /** --sync-interval-cap: the longest backoff (ms). */
  syncIntervalCapMs: number;
  /** Random source in [0, 1) for jitter. */
  random: () => number;
  clock: Clock;
  onFailure: (failure: AttemptFailure) => void;
}

/** Runs attempts until stopped: at once when a target wants one, else every jittered sync interval. */
export class ConnectLoop {
  private readonly backoff: Backoff;
  /** The pending tick; undefined while an attempt runs or once stopped. */
  private timer: TimerHandle = undefined;
  private stopped = false;

  constructor(private readonly o: ConnectLoopOptions) {
    this.backoff = new Backoff({
      initialMs: o.syncIntervalMs,
      capMs: o.syncIntervalCapMs,
      factor: 1.5,
      jitter: 0.1,
      random: o.random,
    });
  }

  /** The first attempt, at once. */
  start(): void {
    this.schedule(0);
  }

  /** No more attempts (drain, close); one in flight finishes. */
  stop(): void {
    this.stopped = true;
    this.o.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** A target wants another tunnel now: when waiting between attempts, attempt at once. */
  poke(): void {
    if (this.timer !== undefined) this.schedule(0);
  }

  /**
   * A tunnel closed (its server went away): when waiting for the next sync, the next attempt comes
   * at a random point of the sync interval rather than at the loop's own phase. Agents that
   * started or reconnected together share that phase, and a server's restart drops them all at
   * once: without this they come back in the same instant. A backoff after failed attempts is kept.
   */
  lost(): void {
    if (this.timer !== undefined && this.backoff.failures === 0)
      this.schedule(Math.round(this.o.random() * this.o.syncIntervalMs));
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.o.clock.clearTimeout(this.timer);
    this.timer = this.o.clock.setTimeout(() => this.tick(), delayMs);
  }

  private jitteredSyncInterval(): number {
    return Math.round(this.o.syncIntervalMs * (1 + 0.1 * (2 * this.o.random() - 1)));
  }

  private tick(): void {
    this.timer = undefined;
    if (this.stopped) return;
    if (!this.o.targets.wantsAnother()) {
      this.schedule(this.jitteredSyncInterval());
      return;
    }
    const started = this.o.clock.now();
    this.o.attempt().then(
      (result) => {
        if (result !== "closed") this.backoff.reset();
        // When the missing targets are known (PortForward), the next one at once.
        this.schedule(
          result === "connected" && this.o.targets.eager && this.o.targets.wantsAnother()
            ? 0
            : this.jitteredSyncInterval(),
        );
      },
      (err: unknown) => {
        const shedding = serverIsShedding(err);
        const retryInMs = this.retryDelay(this.o.clock.now() - started, shedding);
        this.o.onFailure({ err, retryInMs, failures: this.backoff.failures, shedding });
        this.schedule(retryInMs);
      },
    );
  }

  /**
   * The delay before the next attempt after one that failed after `elapsedMs`: the backoff, but
   * never shorter than a jittered `elapsedMs` (a server that took 8 s to fail us is not asked
   * again after 1 s), and when the server said it is shedding load, a jittered
   * `--sync-interval-cap` at least, so a fleet it shed does not come back at once.
   */
  private retryDelay(elapsedMs: number, shedding: boolean): number {
    let delay = this.backoff.next();
    if (elapsedMs > delay) delay = Math.round(elapsedMs * (0.5 + this.o.random()));
    if (shedding) delay = Math.max(delay, Math.round(this.o.syncIntervalCapMs * (0.5 + 0.5 * this.o.random())));
    return delay;
  }
}
