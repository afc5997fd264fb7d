/**
 * @cluster-proxy/fleet: the fleet view (docs/design/fleet-view.md). Promises its model, its HTTP
 * routes with their request/response shapes and the built page's assets, which the gateway and
 * `up` serve; the wire types are shared with the page under `ui/`.
 */
export * from "./fleet-types.js";
export { FleetModel, type RowReport } from "./fleet-model.js";
export type { TrafficDelta } from "./traffic-series.js";
export {
  FleetHttp,
  type FleetLimits,
  type FleetRequest,
  type FleetResponse,
  type FleetViewer,
  type ViewerResult,
} from "./fleet-http.js";
export { UI_DIR, loadUiAssets, type UiAssets } from "./ui-assets.js";
