/** OCM's cluster API resources the suites create on the hub (KubeApi resource references). */
/** `cluster.open-cluster-management.io` Placement. */
export const PLACEMENT = {
  apiVersion: "cluster.open-cluster-management.io/v1beta1",
  kind: "Placement",
  plural: "placements",
  namespaced: true,
};
/** The decisions a Placement's controller writes. */
export const PLACEMENT_DECISION = {
  apiVersion: "cluster.open-cluster-management.io/v1beta1",
  kind: "PlacementDecision",
  plural: "placementdecisions",
  namespaced: true,
};
/** A ManagedClusterSet bound into a namespace, for Placements there. */
export const SET_BINDING = {
  apiVersion: "cluster.open-cluster-management.io/v1beta2",
  kind: "ManagedClusterSetBinding",
  plural: "managedclustersetbindings",
  namespaced: true,
};
/** A set of managed clusters (`global` holds every cluster). */
export const CLUSTER_SET = {
  apiVersion: "cluster.open-cluster-management.io/v1beta2",
  kind: "ManagedClusterSet",
  plural: "managedclustersets",
  namespaced: false,
};
