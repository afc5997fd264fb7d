/**
 * What the gateway asks of the hub, behind one small interface: the real implementation
 * (`kube-hub.ts`) uses @cluster-proxy/kube's client (requests aborted by a signal) and supervised
 * watches; tests use a fake (`testing/fake-hub.ts`).
 */

/** An authenticated identity, as a TokenReview or SubjectAccessReview carries it. */
export interface UserInfo {
  username: string;
  uid?: string;
  groups: string[];
  extra: Record<string, string[]>;
}

/** The resource a SubjectAccessReview asks about. */
export interface ResourceAttributes {
  group: string;
  resource: string;
  subresource?: string;
  name?: string;
  namespace?: string;
  verb: string;
}

/**
 * The answer of a TokenReview: `user` when the hub recognised the token, and `audiences` (its
 * `status.audiences`): those of the review's audiences the token is valid for; empty or absent
 * when the authenticator is audience-unaware, which means the token is valid for the hub
 * apiserver's own audience.
 */
export interface TokenReviewResult {
  user?: UserInfo;
  audiences?: string[];
}

/** A ManagedCluster as far as the gateway cares. */
export interface ManagedClusterInfo {
  name: string;
  labels: Record<string, string>;
}

/** The `Available` condition of a ManagedClusterAddOn. */
export interface AddOnCondition {
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  /** ISO 8601, when the hub says. */
  lastTransitionTime?: string;
}

/** A ManagedClusterAddOn `cluster-proxy`, as the fleet view reads it. */
export interface AddOnInfo {
  /** Its namespace: the cluster's name. */
  cluster: string;
  /** Its `Available` condition, when it has one. */
  available?: AddOnCondition;
}

/**
 * One change of a watched list: the whole list (at first and after every re-list), an object added
 * or changed, or the object named `name` gone.
 */
export type ListEvent<T> = { kind: "list"; items: T[] } | { kind: "set"; item: T } | { kind: "delete"; name: string };

/** One change of a watched ConfigMap: its data, or undefined when it does not exist (any more). */
export type ConfigMapListener = (data: Record<string, string> | undefined) => void;

/** The hub operations the gateway uses. Each rejects with an Error when the hub cannot answer. */
export interface HubApi {
  /**
   * Review `token` for `audiences` (`spec.audiences`; undefined: none, which the hub reads as its
   * own apiserver's audiences); `signal` aborts the review (and closes its request to the hub).
   */
  tokenReview(token: string, audiences?: readonly string[], signal?: AbortSignal): Promise<TokenReviewResult>;
  /** Whether the hub lets `user` do `attributes`; `signal` aborts the review (and closes its request). */
  subjectAccessReview(
    user: UserInfo,
    attributes: ResourceAttributes,
    signal?: AbortSignal,
  ): Promise<{ allowed: boolean; reason?: string }>;
  /** The ManagedCluster `name`, or undefined when there is none; `signal` aborts the lookup. */
  managedCluster(name: string, signal?: AbortSignal): Promise<ManagedClusterInfo | undefined>;
  /**
   * Watch the ConfigMap `namespace/name`: `listener` gets its current state, then every change
   * (re-listing whenever the watch ends). Returns the function that stops watching.
   */
  watchConfigMap(namespace: string, name: string, listener: ConfigMapListener): () => void;
  /**
   * Watch the ManagedClusters: `listener` gets the list, then every change (re-listing whenever
   * the watch ends). Returns the function that stops watching.
   */
  watchManagedClusters(listener: (event: ListEvent<ManagedClusterInfo>) => void): () => void;
  /**
   * Watch the ManagedClusterAddOns named `name` in every cluster namespace (a `delete` names the
   * cluster), as {@link watchManagedClusters}.
   */
  watchAddOns(name: string, listener: (event: ListEvent<AddOnInfo>) => void): () => void;
  /** Record a Warning Event about the ConfigMap `namespace/name`. */
  configMapEvent(namespace: string, name: string, reason: string, message: string): Promise<void>;
}
