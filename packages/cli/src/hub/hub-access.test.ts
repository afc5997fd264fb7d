import assert from "node:assert/strict";
import { after, test } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import { KubeResources, type KubeObject } from "@cluster-proxy/kube";
import { FakeApiServer } from "@cluster-proxy/kube/testing";
import { managedProxyConfigurationFromApi } from "@cluster-proxy/api";
import { TlsFileError } from "@cluster-proxy/tunnel";
import { findProxyEndpoint, proxyCredentials, type Hub, type HubFlags } from "./hub-access.js";

/** A hub whose configuration is the chart's (no inClusterServiceName, no dump) and whose proxy-server namespace holds `services`. */
function hubWith(services: KubeObject[]): () => Promise<Hub> {
  const mpc = managedProxyConfigurationFromApi({
    metadata: { name: "cluster-proxy" },
    spec: { proxyServer: { image: "s", namespace: "open-cluster-management-addon" }, proxyAgent: { image: "a" } },
  });
  return async () => {
    const server = await FakeApiServer.start();
    after(() => server.close());
    for (const service of services) server.put(KubeResources.service, service);
    return { api: server.api(), mpc, kc: new KubeConfig(), inCluster: true };
  };
}
const flags: HubFlags = { configuration: "cluster-proxy", inClusterProxyCertLookup: true, via: "auto" };
const doors: KubeObject = {
  metadata: { name: "cluster-proxy-client-doors", namespace: "open-cluster-management-addon" },
  spec: {
    type: "LoadBalancer",
    selector: { "proxy.open-cluster-management.io/component-name": "proxy-server" },
    ports: [
      { name: "grpc", port: 8090 },
      { name: "http-connect", port: 8093 },
    ],
  },
  status: { loadBalancer: { ingress: [{ ip: "10.200.30.7" }] } },
};

test("a door behind a LoadBalancer Service is verified as the in-cluster Service name its certificate carries", async () => {
  assert.deepEqual(await findProxyEndpoint(hubWith([doors]), flags, 8090), {
    host: "10.200.30.7",
    port: 8090,
    servername: "proxy-entrypoint.open-cluster-management-addon.svc",
  });
  assert.deepEqual(
    await findProxyEndpoint(hubWith([doors]), { ...flags, proxyServerName: "doors.example" }, 8093),
    { host: "10.200.30.7", port: 8093, servername: "doors.example" },
    "--proxy-server-name wins",
  );
});

test("without a LoadBalancer the in-cluster name of a chart-installed configuration (defaults filled in)", async () => {
  assert.deepEqual(await findProxyEndpoint(hubWith([]), flags, 8090), {
    host: "proxy-entrypoint.open-cluster-management-addon.svc",
    port: 8090,
    servername: "proxy-entrypoint.open-cluster-management-addon.svc",
  });
});

test("--proxy-ca-cert/--proxy-cert/--proxy-key go through the one TLS file reader: CP_ERR_TLS_FILE naming the flag", async () => {
  const given = { ...flags, proxyCaCert: "/nonexistent/ca.crt", proxyCert: "/nonexistent/tls.crt", proxyKey: "/k" };
  await assert.rejects(
    proxyCredentials(() => Promise.reject(new Error("the hub is not asked when the files are given")), given),
    (err: unknown) =>
      err instanceof TlsFileError &&
      err.code === "CP_ERR_TLS_FILE" &&
      err.message.startsWith("--proxy-cert: /nonexistent/tls.crt: cannot read: ENOENT"),
  );
});
