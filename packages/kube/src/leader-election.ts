/**
 * Leader election with a `coordination.k8s.io/v1` Lease as client-go does it: expiry judged on the
 * candidate's own clock, updates carrying the resourceVersion, `release()` for a hand-over at once.
 * A holder that runs in a pod (its own pod checked) names that pod in the Lease; a candidate takes
 * the Lease before it expires only when the apiserver answers that this pod no longer exists (a
 * holder that could not release it: helm uninstall removes the manager's rights before its pod).
 * Design: docs/design/addon-manager.md#shape
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { delay, keepAliveClock, type Clock } from "@cluster-proxy/kit";
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
  /**
   * The pod this candidate runs in (in `namespace`), e.g. from the downward API. Once the pod is
   * seen with this uid, the Lease it holds names it (in `holderPodAnnotation`), so that a
   * candidate may take the Lease at once when that pod is gone.
   */
  pod?: { name: string; uid: string };
  /**
   * The Lease annotation that names the holder's pod, `<pod name>/<pod uid>` in the Lease's
   * namespace: written only by a holder that found its own pod with that uid. A candidate that gets
   * 404 for that pod (or finds a pod of another uid under its name) takes the Lease without waiting
   * for it to expire; any other answer (the pod, 403, a timeout) counts as the holder being alive.
   * The name counts only for a holder whose identity is that pod's name, or the name, `_` and a
   * suffix ({@link defaultIdentity}): an annotation left by an earlier holder (an elector without
   * this option keeps it) says nothing of the present one. Without it, a Lease is taken only once
   * it expired or was released.
   */
  holderPodAnnotation?: string;
  /** The clock of the Lease's times and of the waits between tries (default the kit's `keepAliveClock`; tests inject one). */
  clock?: Clock;
}

/** What the elector asks of the apiserver ({@link KubeApi} does it). */
export type LeaseApi = Pick<KubeApi, "get" | "tryGet" | "create" | "replace">;

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
  private readonly clock: Clock;
  /** `<name>/<uid>` of this candidate's pod once seen; "" when it cannot be (no pod, another uid). */
  private ownPod: string | undefined;

  constructor(
    private readonly api: LeaseApi,
    private readonly options: LeaderElectionOptions,
    private readonly logger: Logger,
  ) {
    this.identity = options.identity || defaultIdentity();
    this.clock = options.clock ?? keepAliveClock;
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
    while (!signal.aborted && !(await this.tryAcquireOrRenew()))
      await delay(this.options.retryPeriodMs, signal, this.clock);
    if (signal.aborted) return false;
    this.logger.info(
      { lease: `${this.options.namespace}/${this.options.name}`, identity: this.identity },
      "became leader",
    );
    const leadership = new AbortController();
    lead(leadership.signal);
    try {
      while (!signal.aborted) {
        await delay(this.options.retryPeriodMs, signal, this.clock);
        if (signal.aborted) break;
        if (await this.tryAcquireOrRenew()) continue;
        if (this.clock.now() - this.lastRenew > this.options.renewDeadlineMs) {
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
      lease.spec = {
        ...lease.spec,
        holderIdentity: null,
        leaseDurationSeconds: 1,
        renewTime: microTime(this.clock.now()),
      };
      lease.metadata.annotations = withHolderPod(lease.metadata.annotations, this.options.holderPodAnnotation, "");
      await this.api.replace(KubeResources.lease, lease);
      this.logger.info({ identity: this.identity }, "released the leader lease");
    } catch (err) {
      this.logger.warn(
        { err: errorMessage(err) },
        "could not release the leader lease (a standby takes over when it expires)",
      );
    }
  }

  /** One attempt to take or renew the Lease ({@link run} makes one each retry period); true if this candidate leads. */
  async tryAcquireOrRenew(): Promise<boolean> {
    const { namespace, name, leaseDurationMs } = this.options;
    const now = this.clock.now();
    const mine = {
      holderIdentity: this.identity,
      leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
      renewTime: microTime(now),
    };
    try {
      const lease = await this.api.tryGet<Lease>(KubeResources.lease, name, namespace);
      const ownPod = await this.resolveOwnPod();
      if (!lease) {
        await this.api.create(KubeResources.lease, {
          metadata: {
            name,
            namespace,
            annotations: withHolderPod(undefined, this.options.holderPodAnnotation, ownPod),
          },
          spec: { ...mine, acquireTime: microTime(now), leaseTransitions: 0 },
        });
        return this.won(now);
      }
      const spec = lease.spec ?? {};
      const record = `${spec.holderIdentity ?? ""}|${spec.renewTime ?? ""}`;
      if (this.observed?.record !== record) this.observed = { record, at: now };
      const holder = spec.holderIdentity ?? "";
      const duration = (spec.leaseDurationSeconds ?? 0) * 1000;
      let gonePod = "";
      if (holder !== "" && holder !== this.identity && now < this.observed.at + duration) {
        gonePod = await this.holderPodGone(lease);
        if (!gonePod) {
          this.leading = false;
          return false;
        }
      }
      const taking = holder !== this.identity;
      lease.metadata.annotations = withHolderPod(lease.metadata.annotations, this.options.holderPodAnnotation, ownPod);
      lease.spec = {
        ...spec,
        ...mine,
        acquireTime: taking ? microTime(now) : (spec.acquireTime ?? microTime(now)),
        leaseTransitions: (spec.leaseTransitions ?? 0) + (taking && holder !== "" ? 1 : 0),
      };
      await this.api.replace(KubeResources.lease, lease);
      if (gonePod)
        this.logger.info(
          { previous: holder, pod: gonePod },
          "took over the leader lease before it expired: the holder's pod no longer exists",
        );
      else if (taking && holder !== "") this.logger.info({ previous: holder }, "took over the leader lease");
      return this.won(now);
    } catch (err) {
      if (isConflict(err) || isAlreadyExists(err) || isNotFound(err)) return false;
      this.logger.warn({ err: errorMessage(err) }, "leader election: lease request failed");
      return false;
    }
  }

  /**
   * This candidate's pod as the Lease names it, once the pod was seen with the configured uid; ""
   * without one (not configured, 404, another uid); retried after any other failure.
   */
  private async resolveOwnPod(): Promise<string> {
    const pod = this.options.pod;
    if (this.ownPod !== undefined || !pod || this.options.holderPodAnnotation === undefined) return this.ownPod ?? "";
    try {
      const found = await this.api.get(KubeResources.pod, pod.name, this.options.namespace);
      if (found.metadata.uid === pod.uid) this.ownPod = `${pod.name}/${pod.uid}`;
      else {
        this.ownPod = "";
        this.logger.warn(
          { pod: `${this.options.namespace}/${pod.name}`, uid: pod.uid, found: found.metadata.uid },
          "leader election: this pod has another uid; the Lease will not name it",
        );
      }
    } catch (err) {
      if (!isNotFound(err)) return "";
      this.ownPod = "";
      this.logger.warn(
        { pod: `${this.options.namespace}/${pod.name}` },
        "leader election: no such pod; the Lease will not name it",
      );
    }
    return this.ownPod;
  }

  /**
   * The holder's pod (`<name>/<uid>`) when the Lease names one and the apiserver says it is gone: a
   * 404, or a pod of another uid under its name. "" for anything else (alive, 403, timeout).
   */
  private async holderPodGone(lease: Lease): Promise<string> {
    const key = this.options.holderPodAnnotation;
    const named = key === undefined ? "" : (lease.metadata.annotations?.[key] ?? "");
    const holderPod = parseHolderPod(named);
    if (!holderPod) {
      if (named !== "")
        this.logger.debug(
          { annotation: named.slice(0, 300) },
          "leader election: the Lease names no pod this namespace can hold (waiting for the lease to expire)",
        );
      return "";
    }
    const { podName, uid } = holderPod;
    const holder = lease.spec?.holderIdentity ?? "";
    if (holder !== podName && !holder.startsWith(`${podName}_`)) {
      // Not written by this holder: left by an earlier one through an elector that does not write
      // the annotation (an older version), so that pod's fate says nothing of this holder.
      this.logger.debug(
        { holder, pod: podName },
        "leader election: the Lease names a pod that is not its holder's (waiting for the lease to expire)",
      );
      return "";
    }
    try {
      const pod = await this.api.get(KubeResources.pod, podName, this.options.namespace);
      return pod.metadata.uid !== undefined && pod.metadata.uid !== uid ? named : "";
    } catch (err) {
      if (isNotFound(err)) return named;
      this.logger.debug(
        { pod: podName, err: errorMessage(err) },
        "leader election: could not tell whether the holder's pod exists (waiting for the lease to expire)",
      );
      return "";
    }
  }

  private won(now: number): boolean {
    this.leading = true;
    this.lastRenew = now;
    return true;
  }
}

/** A pod name: a DNS-1123 subdomain (what the apiserver lets a pod be called). */
const POD_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A uid as a pod's `metadata.uid` can be: printable, no slash, no space. */
const POD_UID = /^[\x21-\x2e\x30-\x7e]{1,128}$/;

/**
 * The pod a holder-pod annotation names (`<pod name>/<pod uid>` in the Lease's namespace), or
 * undefined when it is not exactly that: another shape (a namespace, more parts), or a name no pod
 * can have, whose GET could reach something else than that pod (`..` climbs to the namespace) or
 * answer 404 although the holder lives. Such a Lease is waited for.
 */
function parseHolderPod(named: string): { podName: string; uid: string } | undefined {
  const parts = named.split("/");
  if (parts.length !== 2) return undefined;
  const [podName, uid] = parts as [string, string];
  if (podName.length > 253 || !POD_NAME.test(podName) || !POD_UID.test(uid)) return undefined;
  return { podName, uid };
}

/** `annotations` naming `pod` as the holder's in annotation `key`, or none when "" (unchanged without a key). */
function withHolderPod(
  annotations: Record<string, string> | undefined,
  key: string | undefined,
  pod: string,
): Record<string, string> | undefined {
  if (key === undefined) return annotations;
  const rest = Object.fromEntries(Object.entries(annotations ?? {}).filter(([k]) => k !== key));
  if (pod) rest[key] = pod;
  return Object.keys(rest).length > 0 ? rest : undefined;
}
