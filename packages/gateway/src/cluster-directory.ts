/**
 * Which clusters exist: ManagedCluster lookups on the hub, cached briefly (a cluster that was
 * just created or deleted is seen within {@link CLUSTER_CACHE_MS}). It also knows the clusters it
 * has seen exist, so the metrics label only those, and it reports one that disappeared.
 */
import { GatewayError } from "./gateway-error.js";
import type { HubApi, ManagedClusterInfo } from "./hub-api.js";
import type { HubDeadline } from "./hub-deadline.js";
import { TtlCache } from "./ttl-cache.js";
import type { Clock } from "@cluster-proxy/kit";
import { errorMessage } from "@cluster-proxy/errors";

/** How long a lookup is kept. */
export const CLUSTER_CACHE_MS = 5_000;

/** See the module comment. */
export class ClusterDirectory {
  private readonly cache: TtlCache<ManagedClusterInfo | null>;
  private readonly known = new Set<string>();

  constructor(
    private readonly hub: HubApi,
    private readonly onRemoved: (cluster: string) => void = () => undefined,
    clock?: Clock,
  ) {
    this.cache = new TtlCache({ ...(clock ? { clock } : {}) });
  }

  /**
   * The ManagedCluster `name`; a 404 GatewayError when there is none, 503 when the hub cannot say
   * (at the latest at `deadline`, the request's deadline for its hub calls; the lookup goes on for
   * the cache while another request without a passed deadline waits for it).
   */
  async require(name: string, deadline?: HubDeadline): Promise<ManagedClusterInfo> {
    let info = this.cache.peek(name);
    if (info === undefined)
      try {
        const looking = this.cache.get(
          name,
          async (signal) => (await this.hub.managedCluster(name, signal)) ?? null,
          () => CLUSTER_CACHE_MS,
          deadline?.signal,
        );
        info = await (deadline ? deadline.race(looking, "ManagedCluster lookup") : looking);
      } catch (err) {
        throw new GatewayError(
          503,
          "authorization-unavailable",
          `cannot look up ManagedCluster "${name}": ${errorMessage(err)}`,
          {
            cause: err,
          },
        );
      }
    if (!info) {
      if (this.known.delete(name)) this.onRemoved(name);
      throw new GatewayError(404, "unknown-cluster", `cluster "${name}" is not a managed cluster of this hub`);
    }
    this.known.add(name);
    return info;
  }

  /** Whether `name` was seen to exist (and not seen gone since). */
  isKnown(name: string): boolean {
    return this.known.has(name);
  }
}
