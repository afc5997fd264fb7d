/**
 * Every resource the manager reads or writes: the Kubernetes ones ({@link KubeResources}) and the
 * hub's of cluster-proxy and Open Cluster Management ({@link HubResources}).
 */
import { HubResources } from "@cluster-proxy/api";
import { KubeResources, type ResourceRef } from "@cluster-proxy/kube";

/** The resources the manager uses, by name: `Resources.managedProxyConfiguration`, `Resources.secret`, ... */
export const Resources = { ...KubeResources, ...HubResources } as const satisfies Record<string, ResourceRef>;
