/** @cluster-proxy/fleet: the fleet view's model and HTTP routes (docs/design/fleet-view.md). */
export * from "./fleet-types.js";
