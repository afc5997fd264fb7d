/**
 * A supervised list+watch of one collection with its cache: every end of a watch re-lists, reports what
 * changed while away, and watches again; `synced` feeds the manager's readiness.
 * Design: docs/design/addon-manager.md#shape
 */
import { backoffDelay, delay } from "@cluster-proxy/kit";
import { isGone, type KubeApi, type KubeObject, type ResourceRef } from "./kube-api.js";
import type { Logger } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

export type WatchHandler<T extends KubeObject = KubeObject> = (type: "ADDED" | "MODIFIED" | "DELETED", obj: T) => void;

export interface SupervisedWatchOptions {
  namespace?: string;
  labelSelector?: string;
  /** Server-side timeout of one watch request (it is then re-opened at once). Default 300 s. */
  watchTimeoutSeconds?: number;
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
    private readonly options: SupervisedWatchOptions,
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
        const listed = await this.api.list(this.resource, this.options);
        this.replaceCache(listed.items);
        this.synced = true;
        this.markSynced();
        this.failures = 0;
        let resourceVersion = listed.resourceVersion;
        // Watch until the stream fails; a clean end (server timeout) re-opens from the last version.
        for (;;) {
          if (signal.aborted) return;
          await this.api.watch(
            this.resource,
            { ...this.options, resourceVersion, timeoutSeconds: this.options.watchTimeoutSeconds ?? 300 },
            (event) => {
              // An ERROR event never arrives here: it ends the watch (KubeApi.watch rejects).
              if (event.type === "ERROR") return;
              if (event.object.metadata?.resourceVersion) resourceVersion = event.object.metadata.resourceVersion;
              if (event.type === "BOOKMARK") return;
              const key = keyOf(event.object);
              if (event.type === "DELETED") this.cache.delete(key);
              else this.cache.set(key, event.object);
              this.onChange(event.type, event.object);
            },
            signal,
          );
        }
      } catch (err) {
        if (signal.aborted) return;
        this.restarts++;
        if (isGone(err)) {
          this.logger.debug({ resource: this.resource.plural }, "watch expired (410 Gone): re-listing");
          continue;
        }
        this.synced = false;
        const wait = backoffDelay(this.failures++, 500, 30_000);
        this.logger.warn(
          { resource: this.resource.plural, err: errorMessage(err), retryInMs: wait },
          "watch failed: re-listing after a pause",
        );
        await delay(wait, signal);
      }
    }
  }

  private replaceCache(items: T[]): void {
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
