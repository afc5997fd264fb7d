/**
 * Leader election with a `coordination.k8s.io/v1` Lease as client-go does it: expiry judged on the
 * candidate's own clock, updates carrying the resourceVersion, `release()` for a hand-over at once.
 * Design: docs/design/addon-manager.md#shape
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { delay } from "@cluster-proxy/kit";
import { isAlreadyExists, isConflict, isNotFound, KubeResources, type KubeApi, type KubeObject } from "./kube-api.js";
import type { Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity?: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  /** Injected clock (ms), for tests. */
  now?: () => number;
}

interface Lease extends KubeObject {
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number;
    acquireTime?: string | null;
    renewTime?: string | null;
    leaseTransitions?: number;
  };
}

/** A default identity: the host name (the pod name in Kubernetes) and a random suffix. */
export function defaultIdentity(): string {
  return `${hostname()}_${randomBytes(4).toString("hex")}`;
}

const microTime = (ms: number): string => new Date(ms).toISOString().replace("Z", "000Z");

export class LeaderElector {
  readonly identity: string;
  private leading = false;
  private observed: { record: string; at: number } | undefined;
  private lastRenew = 0;
  private readonly now: () => number;

  constructor(
    private readonly api: KubeApi,
    private readonly options: LeaderElectionOptions,
    private readonly logger: Logger,
  ) {
    this.identity = options.identity || defaultIdentity();
    this.now = options.now ?? Date.now;
  }

  isLeader(): boolean {
    return this.leading;
  }

  /**
   * Campaign until this candidate leads, then call `lead(signal)` and keep renewing. Resolves
   * when leadership is lost (the signal given to `lead` aborts first) or `signal` aborts.
   * Returns true if leadership was lost (not stopped).
   */
  async run(signal: AbortSignal, lead: (signal: AbortSignal) => void): Promise<boolean> {
    while (!signal.aborted && !(await this.tryAcquireOrRenew())) await delay(this.options.retryPeriodMs, signal);
    if (signal.aborted) return false;
    this.logger.info(
      { lease: `${this.options.namespace}/${this.options.name}`, identity: this.identity },
      "became leader",
    );
    const leadership = new AbortController();
    lead(leadership.signal);
    try {
      while (!signal.aborted) {
        await delay(this.options.retryPeriodMs, signal);
        if (signal.aborted) break;
        if (await this.tryAcquireOrRenew()) continue;
        if (this.now() - this.lastRenew > this.options.renewDeadlineMs) {
          this.leading = false;
          this.logger.error(
            { lease: `${this.options.namespace}/${this.options.name}`, identity: this.identity },
            "lost leadership: could not renew the lease within the renew deadline",
          );
          return true;
        }
      }
      return false;
    } finally {
      leadership.abort();
    }
  }

  /** Give the lease up (on shutdown), so a standby takes over without waiting for it to expire. */
  async release(): Promise<void> {
    if (!this.leading) return;
    this.leading = false;
    try {
      const lease = await this.api.get<Lease>(KubeResources.lease, this.options.name, this.options.namespace);
      if (lease.spec?.holderIdentity !== this.identity) return;
      lease.spec = { ...lease.spec, holderIdentity: null, leaseDurationSeconds: 1, renewTime: microTime(this.now()) };
      await this.api.replace(KubeResources.lease, lease);
      this.logger.info({ identity: this.identity }, "released the leader lease");
    } catch (err) {
      this.logger.warn(
        { err: errorMessage(err) },
        "could not release the leader lease (a standby takes over when it expires)",
      );
    }
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const { namespace, name, leaseDurationMs } = this.options;
    const now = this.now();
    const mine = {
      holderIdentity: this.identity,
      leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
      renewTime: microTime(now),
    };
    try {
      const lease = await this.api.tryGet<Lease>(KubeResources.lease, name, namespace);
      if (!lease) {
        await this.api.create(KubeResources.lease, {
          metadata: { name, namespace },
          spec: { ...mine, acquireTime: microTime(now), leaseTransitions: 0 },
        });
        return this.won(now);
      }
      const spec = lease.spec ?? {};
      const record = `${spec.holderIdentity ?? ""}|${spec.renewTime ?? ""}`;
      if (this.observed?.record !== record) this.observed = { record, at: now };
      const holder = spec.holderIdentity ?? "";
      const duration = (spec.leaseDurationSeconds ?? 0) * 1000;
      if (holder !== "" && holder !== this.identity && now < this.observed.at + duration) {
        this.leading = false;
        return false;
      }
      const taking = holder !== this.identity;
      lease.spec = {
        ...spec,
        ...mine,
        acquireTime: taking ? microTime(now) : (spec.acquireTime ?? microTime(now)),
        leaseTransitions: (spec.leaseTransitions ?? 0) + (taking && holder !== "" ? 1 : 0),
      };
      await this.api.replace(KubeResources.lease, lease);
      if (taking && holder !== "") this.logger.info({ previous: holder }, "took over the leader lease");
      return this.won(now);
    } catch (err) {
      if (isConflict(err) || isAlreadyExists(err) || isNotFound(err)) return false;
      this.logger.warn({ err: errorMessage(err) }, "leader election: lease request failed");
      return false;
    }
  }

  private won(now: number): boolean {
    this.leading = true;
    this.lastRenew = now;
    return true;
  }
}
