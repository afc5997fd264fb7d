// Every state a set of Pods went through, from a list and a watch resumed at the list's
// resourceVersion: the apiserver sends each change once and in order, so no state is missed, however
// brief (a poll can miss one, or see a mix of two). What rollout checks need: the most pods running
// at once and the fewest ready.
import * as k8s from "@kubernetes/client-node";

/** The census after each event: pods not marked terminating, and those of them that are Ready. */
export interface CensusState {
  running: number;
  ready: number;
}

/** Folds Pod watch events into the number of running and ready pods, recording the extremes. */
export class PodCensus {
  private readonly pods = new Map<string, { name: string; terminating: boolean; ready: boolean }>();
  /** one entry per event (after the initial list), in resourceVersion order */
  readonly history: CensusState[] = [];
  maxRunning = 0;
  minReady = Infinity;

  constructor(initial: readonly k8s.V1Pod[]) {
    for (const p of initial) this.set(p);
    this.record();
  }

  /** Applies one watch event (ADDED, MODIFIED, DELETED). */
  apply(phase: string, pod: k8s.V1Pod): CensusState {
    if (phase === "DELETED") this.pods.delete(pod.metadata?.uid ?? "");
    else this.set(pod);
    return this.record();
  }

  /** The current state. */
  get now(): CensusState {
    const l = [...this.pods.values()].filter((p) => !p.terminating);
    return { running: l.length, ready: l.filter((p) => p.ready).length };
  }

  /** Names of the pods not marked terminating. */
  runningNames(): string[] {
    return [...this.pods.values()].filter((p) => !p.terminating).map((p) => p.name);
  }

  private set(p: k8s.V1Pod): void {
    this.pods.set(p.metadata?.uid ?? "", {
      name: p.metadata?.name ?? "",
      terminating: !!p.metadata?.deletionTimestamp,
      ready: p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false,
    });
  }

  private record(): CensusState {
    const s = this.now;
    this.history.push(s);
    this.maxRunning = Math.max(this.maxRunning, s.running);
    this.minReady = Math.min(this.minReady, s.ready);
    return s;
  }
}

/** A running census. */
export interface PodCensusWatch {
  census: PodCensus;
  /** Ends the watch; throws if it broke on the way (events may have been missed). */
  stop(): PodCensus;
  /** Ends the watch (idempotent; for cleanup). */
  close(): void;
}

/** Lists the Pods of `namespace` matching `labelSelector` and follows every change from there. */
export async function watchPodCensus(
  kc: k8s.KubeConfig,
  namespace: string,
  labelSelector: string,
): Promise<PodCensusWatch> {
  const list = await kc.makeApiClient(k8s.CoreV1Api).listNamespacedPod({ namespace, labelSelector });
  const census = new PodCensus(list.items);
  let broken: string | undefined;
  let stopped = false;
  const abort = await new k8s.Watch(kc).watch(
    `/api/v1/namespaces/${namespace}/pods`,
    { labelSelector, resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: false },
    (phase: string, obj: k8s.V1Pod) => {
      if (phase === "ADDED" || phase === "MODIFIED" || phase === "DELETED") census.apply(phase, obj);
      else broken ??= `watch event ${phase}: ${JSON.stringify(obj)}`;
    },
    (err: unknown) => {
      if (!stopped) broken ??= `the watch ended early: ${err instanceof Error ? err.message : String(err)}`;
    },
  );
  const close = (): void => {
    if (stopped) return;
    stopped = true;
    abort.abort();
  };
  return {
    census,
    stop(): PodCensus {
      close();
      if (broken) throw new Error(`pod census incomplete: ${broken}`);
      return census;
    },
    close,
  };
}
