/**
 * Fairness between the callers of one cluster: per caller, capped ordinary requests (queued, then 429)
 * and long-running ones (429 at once), counted apart; pass-through callers by source address.
 * Guide: docs/guides/gateway.md#fair-shares-of-a-cluster
 */
import type { Duplex } from "node:stream";
import { realClock, type Clock, type TimerHandle } from "@cluster-proxy/kit";
import { GatewayError } from "./gateway-error.js";
import type { Caller } from "./authentication.js";
import type { RequestTarget } from "./request-target.js";
import { sourceKey } from "./source-buckets.js";

/** Settings of {@link UserCaps}. */
export interface UserCapsSettings {
  /** Ordinary requests of one caller in flight to one cluster. */
  maxRequests: number;
  /** Ordinary requests of one caller waiting for one cluster beyond {@link maxRequests}. */
  maxQueued: number;
  /** How long an ordinary request may wait in the queue. */
  queueTimeoutMs: number;
  /** Long-running requests (watch, follow, upgrade) of one caller open to one cluster. */
  maxLongRunning: number;
  clock?: Clock;
  /** Counts a refusal by reason ({@link CapRefusal}; metrics). */
  onRefusal?: (reason: CapRefusal) => void;
}

/** Why a request was refused by a cap (the metric's `reason` label: a fixed set). */
export type CapRefusal = "queue-full" | "queue-timeout" | "long-running";

/** The `Retry-After` (seconds) of a refusal by a cap. */
export const CAP_RETRY_AFTER_S = 1;

/** Ordinary or long-running (see the module comment). */
export type RequestKind = "request" | "long-running";

/** A granted place; call it once when the request has ended. */
export type Release = () => void;

interface Waiter {
  grant(): void;
  timer: TimerHandle;
}

interface Slots {
  requests: number;
  longRunning: number;
  queue: Waiter[];
}

function isTrue(v: string | null): boolean {
  return v === "true" || v === "1";
}

/**
 * Whether a request holds its place for long: an upgrade, or a kube-apiserver request that is a
 * watch (`watch=true`/`1` or the `/watch/` path form) or a `follow=true`/`1` (logs). A Service
 * request is ordinary unless it is an upgrade.
 */
export function kindOf(target: RequestTarget, upgrade: boolean): RequestKind {
  if (upgrade) return "long-running";
  if (target.kind !== "kube") return "request";
  const params = new URLSearchParams(target.query.startsWith("?") ? target.query.slice(1) : target.query);
  const watchPath = /^\/apis?\/(?:[^/]+\/){0,2}watch\//.test(target.path);
  return watchPath || isTrue(params.get("watch")) || isTrue(params.get("follow")) ? "long-running" : "request";
}

/** Whom a request counts against: the hub identity the gateway authenticated, else the source address. */
export function callerKey(caller: Caller, source: string | undefined): string {
  return caller.method === "passthrough" ? sourceKey(source) : `user:${caller.user.username}`;
}

/** See the module comment. */
export class UserCaps {
  private readonly slots = new Map<string, Slots>();
  private readonly clock: Clock;

  constructor(private readonly s: UserCapsSettings) {
    this.clock = s.clock ?? realClock;
  }

  /**
   * A place for a request of `caller` to `cluster`: at once, after waiting in the queue, or a
   * 429 GatewayError (with Retry-After). `gone` aborted while waiting gives the place up (the
   * caller left; the promise then rejects).
   */
  acquire(cluster: string, caller: string, kind: RequestKind, gone?: AbortSignal): Promise<Release> {
    const key = `${cluster}\u0000${caller}`;
    let slots = this.slots.get(key);
    if (!slots) {
      slots = { requests: 0, longRunning: 0, queue: [] };
      this.slots.set(key, slots);
    }
    const s = slots;
    if (kind === "long-running") {
      if (s.longRunning >= this.s.maxLongRunning) {
        this.forgetIfIdle(key, s);
        return Promise.reject(
          this.refuse(
            "long-running",
            `too many long-running requests (watch, follow, exec, attach, port-forward) of one caller to cluster "${cluster}": at most ${this.s.maxLongRunning} at once (--max-long-running-per-user)`,
          ),
        );
      }
      s.longRunning++;
      return Promise.resolve(this.releaser(() => void s.longRunning--, key, s));
    }
    if (s.requests < this.s.maxRequests && s.queue.length === 0) {
      s.requests++;
      return Promise.resolve(this.releaser(() => this.next(s), key, s));
    }
    if (s.queue.length >= this.s.maxQueued) {
      return Promise.reject(
        this.refuse(
          "queue-full",
          `too many requests of one caller to cluster "${cluster}": ${this.s.maxRequests} in flight and ${this.s.maxQueued} waiting (--max-requests-per-user, --max-queued-requests-per-user)`,
        ),
      );
    }
    return new Promise<Release>((resolve, reject) => {
      const leave = (): void => {
        const i = s.queue.indexOf(waiter);
        if (i >= 0) s.queue.splice(i, 1);
        gone?.removeEventListener("abort", onGone);
        this.forgetIfIdle(key, s);
      };
      const onGone = (): void => {
        this.clock.clearTimeout(waiter.timer);
        leave();
        reject(new GatewayError(499, "caller-gone", "the caller left while its request was queued"));
      };
      const waiter: Waiter = {
        grant: () => {
          this.clock.clearTimeout(waiter.timer);
          gone?.removeEventListener("abort", onGone);
          resolve(this.releaser(() => this.next(s), key, s));
        },
        timer: this.clock.setTimeout(() => {
          leave();
          reject(
            this.refuse(
              "queue-timeout",
              `too many requests of one caller to cluster "${cluster}": waited ${this.s.queueTimeoutMs} ms behind ${this.s.maxRequests} in flight (--max-requests-per-user, --queued-request-timeout)`,
            ),
          );
        }, this.s.queueTimeoutMs),
      };
      s.queue.push(waiter);
      gone?.addEventListener("abort", onGone, { once: true });
    });
  }

  /** Requests in flight and waiting now, over all callers and clusters (tests, metrics). */
  get counts(): { requests: number; longRunning: number; queued: number } {
    let requests = 0;
    let longRunning = 0;
    let queued = 0;
    for (const s of this.slots.values()) {
      requests += s.requests;
      longRunning += s.longRunning;
      queued += s.queue.length;
    }
    return { requests, longRunning, queued };
  }

  /** An ordinary place was freed: hand it to the first waiter, else count it free. */
  private next(s: Slots): void {
    const waiter = s.queue.shift();
    if (waiter) waiter.grant();
    else s.requests--;
  }

  private releaser(free: () => void, key: string, s: Slots): Release {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      free();
      this.forgetIfIdle(key, s);
    };
  }

  private forgetIfIdle(key: string, s: Slots): void {
    if (s.requests === 0 && s.longRunning === 0 && s.queue.length === 0 && this.slots.get(key) === s)
      this.slots.delete(key);
  }

  private refuse(reason: CapRefusal, message: string): GatewayError {
    this.s.onRefusal?.(reason);
    return new GatewayError(429, "too-many-requests", message, undefined, CAP_RETRY_AFTER_S);
  }
}

/**
 * The reason of every {@link closeSignal}: made once (an `abort()` without a reason builds a
 * DOMException with its stack for every request).
 */
const RESPONSE_CLOSED = new Error("the response closed");

/** A signal aborted when `response` closes (its exchange is over, or the caller left). */
export function closeSignal(response: { once(event: "close", listener: () => void): unknown }): AbortSignal {
  const ac = new AbortController();
  response.once("close", () => ac.abort(RESPONSE_CLOSED));
  return ac.signal;
}

/** Call `release` when `signal` aborts (at once if it has). */
export function releaseOn(signal: AbortSignal, release: Release): void {
  if (signal.aborted) release();
  else signal.addEventListener("abort", release, { once: true });
}

/** Answer an upgrade request on its raw socket with `err`, a 429 with its Retry-After, and close. */
export function writeRawTooMany(socket: Duplex, err: GatewayError): void {
  const body = `${err.message}\n`;
  socket.end(
    `HTTP/1.1 ${err.status} Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nRetry-After: ${err.retryAfterSeconds ?? CAP_RETRY_AFTER_S}\r\nConnection: close\r\n\r\n${body}`,
  );
}
