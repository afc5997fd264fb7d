/**
 * `@cluster-proxy/tunnel/http`: the same require-loaded `node:http` as `@cluster-proxy/kit/http`
 * (its home, where the reason is written down), kept under this name for the modules that
 * import it from here.
 */
export * from "@cluster-proxy/kit/http";
