/**
 * Test-only: the agent tests use the shared test PKI of `@cluster-proxy/pki/testing`; this
 * re-export keeps the fake proxy server's import of its type.
 */
export type { TestPki } from "@cluster-proxy/pki/testing";
