/**
 * @cluster-proxy/kit: the machinery every long-running component shares, below the data plane and
 * the control plane alike (the addon manager may not import the tunnel): the logger interface,
 * the backoffs, the clock and the component lifecycle. Subpaths: `@cluster-proxy/kit/http` (`node:http` without undici),
 * `@cluster-proxy/kit/endpoints` (the health/metrics/admin endpoint server),
 * `@cluster-proxy/kit/testing` (test-only: the manual clock).
 */
export { type Logger, silentLogger } from "./logger.js";
export { Backoff, backoffDelay, delay } from "./backoff.js";
export { type Clock, keepAliveClock, realClock, type TimerHandle, type Timers } from "./clock.js";
export { type Component, IdleWaiters, InFlight, Lifecycle } from "./lifecycle.js";
export {
  CONNECTION_SPECIFIC_HEADERS,
  connectionOptions,
  HOP_BY_HOP_HEADERS,
  isCallerClaimHeader,
} from "./http-headers.js";
export { guardPlainHttp, plainHttpOnTlsPortResponse } from "./plain-http-guard.js";
export { MULTIPLEXED_SESSION_RESETS } from "./http2-resets.js";
