/**
 * @cluster-proxy/addon-manager: the hub controller of the cluster-proxy addon. It imports no
 * data-plane package: it meets the proxy-servers only through Kubernetes objects.
 */
export { AddonManager, type AddonManagerDeps } from "./addon-manager.js";
export { renderProxyServer, serverArgs, type RenderedObject } from "./render-proxy-server.js";
export { KubeApi, KubeApiError, type KubeObject } from "./runtime/kube-api.js";
export { Resources } from "./resources.js";
