/**
 * @cluster-proxy/api: component option schemas (flags, defaults, validation, docs) and the
 * contracts both sides of a wire import (the gateway endpoint, hub names).
 */
export * from "@cluster-proxy/errors";
export * from "./options.js";
export * from "./server-options.js";
export * from "./agent-options.js";
export * from "./managed-proxy-configuration.js";
export * from "./addon-manager-options.js";
export * from "./gateway-options.js";
export * from "./log-options.js";
export * from "./tls-profile.js";
export * from "./go-flags.js";
export * from "./addon-health.js";
export * from "./chart-values.js";
export * from "./option-schema.js";
export * from "./cluster-name.js";
export * from "./command-options.js";
export * from "./agent-upgrade.js";
export * from "./gateway-aggregated-api.js";
export * from "./gateway-endpoint.js";
export * from "./hub-names.js";
export * from "./hub-resources.js";
