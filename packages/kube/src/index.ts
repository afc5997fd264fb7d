/**
 * @cluster-proxy/kube: a small Kubernetes controller runtime. Promises the API client
 * ({@link KubeApi}), supervised watches with typed caches, work queues and controllers of
 * {@link Reconciler}s, leader election, Events, conditions and API discovery; its Prometheus metrics
 * are `@cluster-proxy/kube/metrics`. Design: docs/design/addon-manager.md#shape
 */
export {
  KubeApi,
  KubeApiError,
  KubeResources,
  typedResource,
  isAlreadyExists,
  isConflict,
  isNotFound,
  type KubeApiConfig,
  type KubeObject,
  type OwnerReference,
  type ResourceRef,
  type WatchEvent,
} from "./kube-api.js";
export { SupervisedWatch, type AnyWatch, type SupervisedWatchOptions } from "./supervised-watch.js";
export { TerminalError, type ReconcileResult } from "./work-queue.js";
export { Controller, type ControllerSpec, type ReconcileMetrics } from "./controller.js";
export { LeaderElector } from "./leader-election.js";
export { EventRecorder } from "./events.js";
export { mergeConditions, type ConditionInput } from "./conditions.js";
export { apisServed } from "./api-discovery.js";
