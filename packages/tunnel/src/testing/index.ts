/**
 * `@cluster-proxy/tunnel/testing`: helpers for tests of the tunnel's users (bounded waits, free
 * ports), never part of the runtime import path (the subpath resolves only under the `source`
 * condition tests run with).
 */
export * from "./wait.js";
export * from "./client-hello.js";
export * as rawH2 from "./h2-frames.js";
