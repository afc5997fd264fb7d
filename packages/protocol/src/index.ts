/**
 * @cluster-proxy/protocol: the konnectivity wire protocol, with no I/O.
 */
export * from "./packet.js";
export * from "./constants.js";
export * from "./identifiers.js";
export * from "./address.js";
export * from "./flow-control.js";
