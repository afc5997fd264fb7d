/** @cluster-proxy/fleet: the fleet view's model and HTTP routes (docs/design/fleet-view.md). */
export * from "./fleet-types.js";
export { FleetModel, type FleetChange, type RowReport } from "./fleet-model.js";
export type { TrafficDelta } from "./traffic-series.js";
export {
  DEFAULT_FLEET_LIMITS,
  FleetHttp,
  type FleetHttpOptions,
  type FleetLimits,
  type FleetRequest,
  type FleetResponse,
  type FleetViewer,
  type ViewerResult,
} from "./fleet-http.js";
export { UI_DIR, loadUiAssets, type UiAsset, type UiAssets } from "./ui-assets.js";
