/**
 * Every resource the manager reads or writes: the Kubernetes ones of the runtime
 * ({@link KubeResources}) and cluster-proxy's and Open Cluster Management's.
 */
import { KubeResources, type ResourceRef } from "./runtime/kube-api.js";

/** The resources the manager uses, by name: `Resources.managedProxyConfiguration`, `Resources.secret`, ... */
export const Resources = {
  ...KubeResources,
  managedProxyConfiguration: {
    apiVersion: "proxy.open-cluster-management.io/v1alpha1",
    kind: "ManagedProxyConfiguration",
    plural: "managedproxyconfigurations",
    namespaced: false,
  },
  // Open Cluster Management, in the versions every OCM v1.2.1 component speaks (v1alpha1 addons).
  managedCluster: {
    apiVersion: "cluster.open-cluster-management.io/v1",
    kind: "ManagedCluster",
    plural: "managedclusters",
    namespaced: false,
  },
  clusterManagementAddOn: {
    apiVersion: "addon.open-cluster-management.io/v1alpha1",
    kind: "ClusterManagementAddOn",
    plural: "clustermanagementaddons",
    namespaced: false,
  },
  managedClusterAddOn: {
    apiVersion: "addon.open-cluster-management.io/v1alpha1",
    kind: "ManagedClusterAddOn",
    plural: "managedclusteraddons",
    namespaced: true,
  },
  addOnDeploymentConfig: {
    apiVersion: "addon.open-cluster-management.io/v1alpha1",
    kind: "AddOnDeploymentConfig",
    plural: "addondeploymentconfigs",
    namespaced: true,
  },
  apiService: {
    apiVersion: "apiregistration.k8s.io/v1",
    kind: "APIService",
    plural: "apiservices",
    namespaced: false,
  },
  manifestWork: {
    apiVersion: "work.open-cluster-management.io/v1",
    kind: "ManifestWork",
    plural: "manifestworks",
    namespaced: true,
  },
} as const satisfies Record<string, ResourceRef>;
