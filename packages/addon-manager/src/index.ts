/**
 * @cluster-proxy/addon-manager: the hub controller of the cluster-proxy addon. Promises the
 * {@link AddonManager} (what `cluster-proxy addon-manager` runs) and the Kubernetes client the CLI's
 * hub operations share with it ({@link KubeApi}, {@link Resources}). It imports no data-plane
 * package: it meets the proxy-servers only through Kubernetes objects.
 */
export { AddonManager } from "./addon-manager.js";
export { KubeApi, KubeApiError, type KubeObject } from "./runtime/kube-api.js";
export { Resources } from "./resources.js";
