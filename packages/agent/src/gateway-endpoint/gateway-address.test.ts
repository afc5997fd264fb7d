/**
 * The reserved address as both sides of the contract see it: the gateway dials
 * `gatewayEndpointAddress(cluster)` and the proxy-servers hand the agent `<host>:<port>`; the agent
 * serves exactly that host, whatever its case or port.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { GATEWAY_ENDPOINT_HOST, GATEWAY_ENDPOINT_PORT, gatewayEndpointAddress } from "@cluster-proxy/api";
import { isGatewayAddress } from "./gateway-address.js";

test("the contract's values: changing them is a protocol change (gateways and agents roll out together)", () => {
  assert.equal(gatewayEndpointAddress("mc1"), "gateway.cluster-proxy.invalid.mc1:443");
});

test("the agent serves the host the gateway dials, any case, trailing dot, any port; nothing else", () => {
  assert.equal(isGatewayAddress(`${GATEWAY_ENDPOINT_HOST}:${GATEWAY_ENDPOINT_PORT}`), true);
  assert.equal(isGatewayAddress(`${GATEWAY_ENDPOINT_HOST.toUpperCase()}.:8443`), true);
  assert.equal(isGatewayAddress(GATEWAY_ENDPOINT_HOST), true);
  for (const other of [
    "kubernetes.default.svc:443",
    `x${GATEWAY_ENDPOINT_HOST}:443`,
    `${GATEWAY_ENDPOINT_HOST}.evil:443`,
    "cluster-proxy.invalid:443",
  ])
    assert.equal(isGatewayAddress(other), false, other);
});
