/**
 * Test-only fixtures of @cluster-proxy/gateway: a fake hub, a fake agent gateway endpoint and a
 * running gateway with its own PKI.
 */
export * from "./fake-hub.js";
export * from "./fake-endpoint.js";
export * from "./gateway-fixture.js";
export * from "./test-issuer.js";
