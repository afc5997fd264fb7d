/**
 * @cluster-proxy/addon-manager: the hub controller of the cluster-proxy addon. Promises the
 * {@link AddonManager} (what `cluster-proxy addon-manager` runs) and the {@link Resources} it reads
 * and writes. It imports no data-plane package: it meets the proxy-servers only through Kubernetes
 * objects.
 */
export { AddonManager } from "./addon-manager.js";
export { Resources } from "./resources.js";
