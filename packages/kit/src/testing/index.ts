/** `@cluster-proxy/kit/testing`: test-only helpers (runtime code may not import them). */
export * from "./manual-clock.js";
export * from "./recording-logger.js";
