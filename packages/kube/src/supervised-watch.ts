/**
 * A supervised list+watch of one collection with its cache: every end of a watch re-lists, reports what
 * changed while away, and watches again; `synced` feeds the manager's readiness.
 * Design: docs/design/addon-manager.md#shape
 */
import { backoffDelay, delay } from "@cluster-proxy/kit";
import { isGone, type KubeApi, type KubeObject, type ListOptions, type ResourceRef } from "./kube-api.js";
import type { Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

export type WatchHandler<T extends KubeObject = KubeObject> = (type: "ADDED" | "MODIFIED" | "DELETED", obj: T) => void;

export interface SupervisedWatchOptions<T extends KubeObject = KubeObject> extends ListOptions {
  /** Server-side timeout of one watch request (it is then re-opened at once). Default 300 s. */
  watchTimeoutSeconds?: number;
  /**
   * Gets the whole collection after every (re)list, for a consumer that replaces its state: a
   * re-list is then not reported object by object to the handler, which gets the watch's events only.
   */
  onList?: (items: T[]) => void;
  /** Told of every failed list or watch (logged, and retried after `retryInMs`); not of a 410 Gone. */
  onFailure?: (err: unknown, retryInMs: number) => void;
  /** The pause after failures: from `initialMs` (default 500), doubling up to `capMs` (default 30 s). */
  retry?: { initialMs: number; capMs: number };
  /** List again when the server ends a watch too (its timeout), instead of watching on from the last version. */
  relistWhenWatchEnds?: boolean;
}

const keyOf = (o: KubeObject): string => `${o.metadata.namespace ?? ""}/${o.metadata.name}`;

/** A supervised watch of the `T`s of one resource: a typed cache of them. */
export class SupervisedWatch<T extends KubeObject = KubeObject> {
  private readonly cache = new Map<string, T>();
  private failures = 0;
  private synced = false;
  /** Times the watch was (re)started after the first list: a metric. */
  restarts = 0;
  private markSynced!: () => void;
  /** Resolves once the first list has filled the cache. */
  readonly firstSync = new Promise<void>((resolve) => (this.markSynced = resolve));

  constructor(
    private readonly api: KubeApi,
    readonly resource: ResourceRef<T>,
    private readonly options: SupervisedWatchOptions<T>,
    private readonly onChange: WatchHandler<T>,
    private readonly logger: Logger,
  ) {}

  /** True while the cache is current. */
  isSynced(): boolean {
    return this.synced;
  }

  /** The cached objects. */
  items(): T[] {
    return [...this.cache.values()];
  }

  get(name: string, namespace?: string): T | undefined {
    return this.cache.get(`${namespace ?? ""}/${name}`);
  }

  /** Run until `signal` aborts. Never rejects. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        const listed = await this.api.list(this.resource, this.selection());
        if (signal.aborted) return;
        this.replaceCache(listed.items);
        this.synced = true;
        this.markSynced();
        this.failures = 0;
        this.options.onList?.(listed.items);
        let resourceVersion = listed.resourceVersion;
        // Watch until the stream fails; a clean end (server timeout) re-opens from the last version
        // (or lists again: relistWhenWatchEnds).
        for (;;) {
          if (signal.aborted) return;
          await this.api.watch(
            this.resource,
            { ...this.selection(), resourceVersion, timeoutSeconds: this.options.watchTimeoutSeconds ?? 300 },
            (event) => {
              // An ERROR event never arrives here: it ends the watch (KubeApi.watch rejects).
              if (event.type === "ERROR" || signal.aborted) return;
              if (event.object.metadata?.resourceVersion) resourceVersion = event.object.metadata.resourceVersion;
              if (event.type === "BOOKMARK") return;
              const key = keyOf(event.object);
              if (event.type === "DELETED") this.cache.delete(key);
              else this.cache.set(key, event.object);
              this.onChange(event.type, event.object);
            },
            signal,
          );
          if (this.options.relistWhenWatchEnds) break;
        }
      } catch (err) {
        if (signal.aborted) return;
        this.restarts++;
        if (isGone(err)) {
          this.logger.debug({ resource: this.resource.plural }, "watch expired (410 Gone): re-listing");
          continue;
        }
        this.synced = false;
        const wait = backoffDelay(
          this.failures++,
          this.options.retry?.initialMs ?? 500,
          this.options.retry?.capMs ?? 30_000,
        );
        this.logger.warn(
          { resource: this.resource.plural, err: errorMessage(err), retryInMs: wait },
          "watch failed: re-listing after a pause",
        );
        this.options.onFailure?.(err, wait);
        await delay(wait, signal);
      }
    }
  }

  private selection(): ListOptions {
    const { namespace, labelSelector, fieldSelector } = this.options;
    return { namespace, labelSelector, fieldSelector };
  }

  private replaceCache(items: T[]): void {
    if (this.options.onList) {
      this.cache.clear();
      for (const item of items) this.cache.set(keyOf(item), item);
      return;
    }
    const seen = new Set<string>();
    for (const item of items) {
      const key = keyOf(item);
      seen.add(key);
      const old = this.cache.get(key);
      this.cache.set(key, item);
      if (!old) this.onChange("ADDED", item);
      else if (old.metadata.resourceVersion !== item.metadata.resourceVersion) this.onChange("MODIFIED", item);
    }
    for (const [key, old] of [...this.cache]) {
      if (!seen.has(key)) {
        this.cache.delete(key);
        this.onChange("DELETED", old);
      }
    }
  }
}

/** A watch of any resource, as readiness, metrics and the run loop see it. */
export type AnyWatch = Pick<SupervisedWatch, "resource" | "restarts" | "firstSync" | "isSynced" | "run">;
