/**
 * `@cluster-proxy/pki/testing`: throwaway certificates for tests, never part of the runtime
 * import path (the subpath resolves only under the `source` condition tests run with).
 */
export * from "./test-pki.js";
export * from "./certificate-request.js";
