/**
 * A fake of the gateway's own {@link HubApi} port, not of the Kubernetes API server (that is `@cluster-proxy/kube/testing`).
 * Test-only: an in-memory hub behind {@link HubApi}: tokens it recognises, grants it allows,
 * ManagedClusters and ManagedClusterAddOns (watchers hear of changes), the services ConfigMap (set by the test, delivered as a watch would) and the
 * Events recorded. Counts its calls, and can be told to fail.
 */
import type {
  AddOnCondition,
  AddOnInfo,
  ConfigMapListener,
  HubApi,
  ListEvent,
  ManagedClusterInfo,
  ResourceAttributes,
  TokenReviewResult,
  UserInfo,
} from "../hub-api.js";

/** The key of one grant: who may do what to which object. */
function grantKey(user: string, a: ResourceAttributes): string {
  return [user, a.verb, a.group, a.resource, a.subresource ?? "", a.namespace ?? "", a.name ?? ""].join("|");
}

/** The fake hub apiserver's own audience: what its tokens carry unless told otherwise. */
export const FAKE_HUB_API_AUDIENCE = "https://kubernetes.default.svc";

/** See the module comment. */
export class FakeHub implements HubApi {
  readonly tokens = new Map<string, UserInfo>();
  readonly clusters = new Map<string, ManagedClusterInfo>();
  readonly events: { namespace: string; name: string; reason: string; message: string }[] = [];
  readonly reviews: string[] = [];
  /** The `spec.audiences` of each TokenReview (undefined: none asked, i.e. the hub apiserver's). */
  readonly reviewAudiences: (readonly string[] | undefined)[] = [];
  /** The audiences of a token of {@link tokens} (default: {@link FAKE_HUB_API_AUDIENCE}). */
  readonly tokenAudiences = new Map<string, string[]>();
  readonly accessReviews: { user: UserInfo; attributes: ResourceAttributes }[] = [];
  failTokenReview = false;
  failAccessReview = false;
  private readonly grants = new Set<string>();
  /** ConfigMaps by name (the namespace is not modelled). */
  private readonly configMaps = new Map<string, Record<string, string>>();
  private readonly listeners = new Map<ConfigMapListener, string>();
  /** The ManagedClusterAddOns `cluster-proxy`, by cluster. */
  readonly addOns = new Map<string, AddOnInfo>();
  private readonly clusterWatchers = new Set<(event: ListEvent<ManagedClusterInfo>) => void>();
  private readonly addOnWatchers = new Set<(event: ListEvent<AddOnInfo>) => void>();

  /** Let `user` (a user name or `group:<name>`) do `verb` on the resource. */
  grant(user: string, attributes: ResourceAttributes): void {
    this.grants.add(grantKey(user, attributes));
  }

  /** Let `user` `verb` managedclusters/proxy `cluster`. */
  grantProxy(user: string, cluster: string, ...verbs: string[]): void {
    for (const verb of verbs)
      this.grant(user, {
        group: "cluster.open-cluster-management.io",
        resource: "managedclusters",
        subresource: "proxy",
        name: cluster,
        verb,
      });
  }

  addCluster(name: string, labels: Record<string, string> = {}): void {
    const info = { name, labels };
    this.clusters.set(name, info);
    for (const w of this.clusterWatchers) w({ kind: "set", item: info });
  }

  /** Delete the ManagedCluster `name`. */
  removeCluster(name: string): void {
    this.clusters.delete(name);
    for (const w of this.clusterWatchers) w({ kind: "delete", name });
  }

  /** Create or update the ManagedClusterAddOn of `cluster` (with its `Available` condition, if any). */
  setAddOn(cluster: string, available?: AddOnCondition): void {
    const info: AddOnInfo = { cluster, ...(available ? { available } : {}) };
    this.addOns.set(cluster, info);
    for (const w of this.addOnWatchers) w({ kind: "set", item: info });
  }

  /** Delete the ManagedClusterAddOn of `cluster`. */
  removeAddOn(cluster: string): void {
    this.addOns.delete(cluster);
    for (const w of this.addOnWatchers) w({ kind: "delete", name: cluster });
  }

  /**
   * Set (undefined: delete) a ConfigMap, by default the exposed services one, and tell its
   * watchers; `name` "extension-apiserver-authentication" is the hub's requestheader settings.
   */
  setConfigMap(data: Record<string, string> | undefined, name = "cluster-proxy-exposed-services"): void {
    if (data) this.configMaps.set(name, data);
    else this.configMaps.delete(name);
    for (const [l, watched] of this.listeners) if (watched === name) l(data);
  }

  /** As the hub apiserver: the token is valid for the audiences it and the review have in common. */
  tokenReview(token: string, audiences?: readonly string[]): Promise<TokenReviewResult> {
    this.reviews.push(token);
    this.reviewAudiences.push(audiences ? [...audiences] : undefined);
    if (this.failTokenReview) return Promise.reject(new Error("connection refused"));
    const user = this.tokens.get(token);
    const held = this.tokenAudiences.get(token) ?? [FAKE_HUB_API_AUDIENCE];
    const common = held.filter((a) => (audiences ?? [FAKE_HUB_API_AUDIENCE]).includes(a));
    return Promise.resolve(user && common.length > 0 ? { user, audiences: common } : {});
  }

  subjectAccessReview(user: UserInfo, attributes: ResourceAttributes): Promise<{ allowed: boolean }> {
    this.accessReviews.push({ user, attributes });
    if (this.failAccessReview) return Promise.reject(new Error("connection refused"));
    const allowed = [user.username, ...user.groups.map((g) => `group:${g}`)].some((who) =>
      this.grants.has(grantKey(who, attributes)),
    );
    return Promise.resolve({ allowed });
  }

  managedCluster(name: string): Promise<ManagedClusterInfo | undefined> {
    return Promise.resolve(this.clusters.get(name));
  }

  watchConfigMap(_namespace: string, name: string, listener: ConfigMapListener): () => void {
    this.listeners.set(listener, name);
    listener(this.configMaps.get(name));
    return () => this.listeners.delete(listener);
  }

  watchManagedClusters(listener: (event: ListEvent<ManagedClusterInfo>) => void): () => void {
    this.clusterWatchers.add(listener);
    listener({ kind: "list", items: [...this.clusters.values()] });
    return () => this.clusterWatchers.delete(listener);
  }

  watchAddOns(_name: string, listener: (event: ListEvent<AddOnInfo>) => void): () => void {
    this.addOnWatchers.add(listener);
    listener({ kind: "list", items: [...this.addOns.values()] });
    return () => this.addOnWatchers.delete(listener);
  }

  configMapEvent(namespace: string, name: string, reason: string, message: string): Promise<void> {
    this.events.push({ namespace, name, reason, message });
    return Promise.resolve();
  }
}
