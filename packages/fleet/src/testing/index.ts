/** Test-only helpers of `@cluster-proxy/fleet` (resolved under the `source` condition only). */
export * from "./event-reader.js";
