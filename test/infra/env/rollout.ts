import { createHash } from "node:crypto";

// What the process kubelet's Deployment controller does next: how many pods of the current
// template to create and which pods to stop, following the Deployment's strategy the way the
// real deployment controller scales its ReplicaSets (RollingUpdate: maxSurge / maxUnavailable,
// defaults 25% rounded up / down; Recreate: all old pods gone before the first new one).

export interface PodView {
  name: string;
  /** template hash the pod was made from */
  hash: string;
  ready: boolean;
  /** being stopped: counts for nothing, but a Recreate rollout waits for it */
  terminating: boolean;
  /** creation order, larger = newer */
  seq: number;
}

export interface Strategy {
  type?: string;
  rollingUpdate?: { maxSurge?: number | string; maxUnavailable?: number | string };
}

export interface Plan {
  create: number;
  delete: string[];
}

/** An int-or-percent field resolved against `total` (percentages round up or down as Kubernetes does). */
export function intOrPercent(v: number | string | undefined, total: number, dflt: string, roundUp: boolean): number {
  const val = v ?? dflt;
  if (typeof val === "number") return Math.max(0, Math.floor(val));
  const m = /^(\d+)%$/.exec(val);
  if (!m) {
    const n = Number(val);
    if (Number.isInteger(n) && n >= 0) return n;
    throw new Error(`invalid int-or-percent value ${JSON.stringify(val)}`);
  }
  const x = (Number(m[1]) * total) / 100;
  return roundUp ? Math.ceil(x) : Math.floor(x);
}

export function surgeAndUnavailable(desired: number, s: Strategy | undefined): { surge: number; unavailable: number } {
  let surge = intOrPercent(s?.rollingUpdate?.maxSurge, desired, "25%", true);
  const unavailable = intOrPercent(s?.rollingUpdate?.maxUnavailable, desired, "25%", false);
  // Kubernetes rejects both 0; be lenient and make progress possible.
  if (surge === 0 && unavailable === 0) surge = 1;
  return { surge, unavailable };
}

// Scale-down order: not ready before ready, newest first (as the ReplicaSet controller prefers).
const byDeletionPreference = (a: PodView, b: PodView): number => Number(a.ready) - Number(b.ready) || b.seq - a.seq;

export function planRollout(desired: number, hash: string, strategy: Strategy | undefined, pods: PodView[]): Plan {
  const live = pods.filter((p) => !p.terminating);
  const current = live.filter((p) => p.hash === hash);
  const old = live.filter((p) => p.hash !== hash);
  const scaleCurrent = (): Plan => {
    if (current.length >= desired) {
      return {
        create: 0,
        delete: [...current]
          .sort(byDeletionPreference)
          .slice(0, current.length - desired)
          .map((p) => p.name),
      };
    }
    return { create: desired - current.length, delete: [] };
  };
  if (strategy?.type === "Recreate") {
    if (old.length > 0) return { create: 0, delete: old.map((p) => p.name) };
    if (pods.some((p) => p.terminating && p.hash !== hash)) return { create: 0, delete: [] };
    return scaleCurrent();
  }
  if (old.length === 0) return scaleCurrent();
  const { surge, unavailable } = surgeAndUnavailable(desired, strategy);
  const maxTotal = desired + surge;
  const minAvailable = desired - unavailable;
  const create = Math.max(0, Math.min(maxTotal - live.length, desired - current.length));
  const del: string[] = [];
  // Too many current pods (scaled down during a rollout): drop the extra first.
  if (current.length > desired) del.push(...scaleCurrent().delete);
  const currentUnavailable = current.filter((p) => !p.ready).length;
  let budget = live.length - del.length - minAvailable - currentUnavailable;
  let ready = live.filter((p) => p.ready).length;
  for (const p of [...old].sort(byDeletionPreference)) {
    if (budget <= 0) break;
    if (p.ready && ready - 1 < minAvailable) break;
    del.push(p.name);
    budget--;
    if (p.ready) ready--;
  }
  return { create, delete: del };
}

/**
 * JSON with sorted keys and without null / undefined members, Dates as ISO strings: the same for an
 * object decoded by the typed client (a list) and the plain JSON of a watch event, so that a
 * template hash does not change between the two.
 */
export function canonicalJson(v: unknown): string {
  const norm = (x: unknown): unknown => {
    if (x instanceof Date) return x.toISOString();
    if (Array.isArray(x)) return x.map((e) => (e === undefined || e === null ? null : norm(e)));
    if (x && typeof x === "object") {
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(x).sort()) {
        const val = (x as Record<string, unknown>)[k];
        if (val !== undefined && val !== null) out[k] = norm(val);
      }
      return out;
    }
    return x;
  };
  return JSON.stringify(norm(v));
}

/**
 * The pod-template-hash of a Deployment's template. Canonical: a Deployment from an informer's list
 * (typed) and from a watch event (plain JSON) hash the same, or the first watch event would look
 * like a new template and start a rollout.
 */
export function templateHash(d: { spec?: { template?: unknown } }): string {
  return createHash("sha256")
    .update(canonicalJson(d.spec?.template ?? {}))
    .digest("hex")
    .slice(0, 10);
}
