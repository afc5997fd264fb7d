/**
 * The one shape of a long-running component (proxy-server, proxy-agent, gateway, addon manager):
 * start once, drain once, close once, and count the work in flight until it is idle.
 * Design: docs/design/architecture.md#one-component-shape
 */
import { realClock, type Timers } from "./clock.js";

/** A long-running component, as the CLI runs it. */
export interface Component<Started = void> {
  /** Open its ports and begin; resolves with what its one "started" log line says. */
  start(): Promise<Started>;
  /**
   * The graceful part of a stop, before close (stop taking new work, let the rest finish);
   * resolves false when work in flight was cut.
   */
  drain?(): Promise<boolean>;
  /** Stop and release everything (after a drain, or at once: the second signal). */
  close(): Promise<void>;
}

/**
 * The promises of a component's start, drain and close, each run at most once: a second call gets
 * the first one's promise. A start after close began rejects, and a drain after it resolves false.
 */
export class Lifecycle<Started> {
  private startRun: Promise<Started> | undefined;
  private drainRun: Promise<boolean> | undefined;
  private closeRun: Promise<void> | undefined;

  /** `component` names the component in the error of a start after close. */
  constructor(private readonly component: string) {}

  /** start() was called. */
  get started(): boolean {
    return this.startRun !== undefined;
  }

  /** drain() was called. */
  get draining(): boolean {
    return this.drainRun !== undefined;
  }

  /** drain() or close() was called: no new work should be taken. */
  get stopping(): boolean {
    return this.drainRun !== undefined || this.closeRun !== undefined;
  }

  /** close() was called. */
  get closed(): boolean {
    return this.closeRun !== undefined;
  }

  /** Run `run` on the first call; every later call gets its promise, until close: then it rejects. */
  start(run: () => Promise<Started>): Promise<Started> {
    if (this.closeRun) return Promise.reject(new Error(`${this.component} is closed`));
    this.startRun ??= run();
    return this.startRun;
  }

  /** Resolves once a start that began has settled, fulfilled or not (at once when none began). */
  async startSettled(): Promise<void> {
    await this.startRun?.catch(() => undefined);
  }

  /** Run `run` on the first call (resolves false after close began); every later call gets its promise. */
  drain(run: () => Promise<boolean>): Promise<boolean> {
    if (this.closeRun && !this.drainRun) return Promise.resolve(false);
    this.drainRun ??= run();
    return this.drainRun;
  }

  /** Run `run` on the first call; every later call gets its promise. */
  close(run: () => Promise<void>): Promise<void> {
    this.closeRun ??= run();
    return this.closeRun;
  }
}

/**
 * Waiters for a condition that turns true as work ends ("no connection left"): the component says
 * when it may have turned ({@link notify}), {@link wait} resolves once it has, or at a timeout.
 */
export class IdleWaiters {
  private readonly waiters = new Set<() => void>();

  constructor(
    private readonly isIdle: () => boolean,
    private readonly timers: Timers = realClock,
  ) {}

  /** Wake the waiters if the component is idle now. */
  notify(): void {
    if (this.waiters.size === 0 || !this.isIdle()) return;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }

  /** Resolves true once idle, or false after `timeoutMs` (none: no timeout). */
  wait(timeoutMs?: number): Promise<boolean> {
    if (this.isIdle()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timers = this.timers;
      const timer = timeoutMs === undefined ? undefined : timers.setTimeout(() => finish(false), timeoutMs);
      const waiters = this.waiters;
      function finish(idle: boolean): void {
        waiters.delete(onIdle);
        timers.clearTimeout(timer);
        resolve(idle);
      }
      const onIdle = (): void => finish(true);
      waiters.add(onIdle);
    });
  }
}

/** Counts work in flight (requests, connections); {@link whenIdle} waits until none is left. */
export class InFlight {
  private n = 0;
  private readonly idle: IdleWaiters;

  constructor(
    timers: Timers = realClock,
    /** Told the new count after every change (e.g. to set a gauge). */
    private readonly onChange?: (count: number) => void,
  ) {
    this.idle = new IdleWaiters(() => this.n === 0, timers);
  }

  /** Work in flight now. */
  get count(): number {
    return this.n;
  }

  /** One more piece of work; the function returned ends it (a second call does nothing). */
  begin(): () => void {
    this.n++;
    this.onChange?.(this.n);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.n--;
      this.onChange?.(this.n);
      this.idle.notify();
    };
  }

  /** Resolves true once no work is in flight, or false after `timeoutMs` (none: no timeout). */
  whenIdle(timeoutMs?: number): Promise<boolean> {
    return this.idle.wait(timeoutMs);
  }
}
