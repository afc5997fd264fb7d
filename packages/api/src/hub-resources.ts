/**
 * The hub's resources of cluster-proxy and Open Cluster Management that more than one component
 * reads or writes (the addon manager, the gateway, the CLI's hub operations), by name, in the shape
 * of `@cluster-proxy/kube`'s `ResourceRef`; the Kubernetes ones are its `KubeResources`.
 */
import { MPC_API_VERSION, MPC_PLURAL } from "./managed-proxy-configuration.js";

/** `HubResources.managedCluster`, ...: where each kind lives in the hub's API. */
export const HubResources = {
  managedProxyConfiguration: {
    apiVersion: MPC_API_VERSION,
    kind: "ManagedProxyConfiguration",
    plural: MPC_PLURAL,
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
} as const;
