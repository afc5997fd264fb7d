/**
 * Test-only: server options for in-process tests on loopback with free ports and the split trust
 * of a test PKI (`@cluster-proxy/pki/testing`).
 */
import { parseServerOptions, serverOptionsSchema, withDefaults, type ServerOptions } from "@cluster-proxy/api";
import type { TestPki } from "@cluster-proxy/pki/testing";

/**
 * Server options for in-process tests: the schema's defaults (so options added later are covered),
 * loopback, ports picked by the kernel, the test PKI's split trust, then `overrides`; validated as
 * `parseServerOptions` does (throws its ConfigError).
 */
export function testServerOptions(pki: TestPki, overrides: Partial<ServerOptions> = {}): ServerOptions {
  return parseServerOptions({
    ...withDefaults(serverOptionsSchema, {}),
    mode: "both",
    serverPort: 0,
    serverBindAddress: "127.0.0.1",
    httpConnectPort: 0,
    httpConnectBindAddress: "",
    httpConnectPlain: false,
    udsName: "",
    httpConnectUdsName: "",
    deleteExistingUdsFile: true,
    agentPort: 0,
    agentBindAddress: "127.0.0.1",
    healthPort: 0,
    healthBindAddress: "127.0.0.1",
    adminPort: 0,
    adminBindAddress: "127.0.0.1",
    serverCert: pki.paths.server.cert,
    serverKey: pki.paths.server.key,
    serverCaCert: pki.paths.clientCa.cert,
    clusterCert: pki.paths.server.cert,
    clusterKey: pki.paths.server.key,
    clusterCaCert: pki.paths.agentCa.cert,
    proxyStrategies: ["destHost"],
    serverCount: 3,
    serverId: "server-under-test",
    keepaliveTime: 0,
    frontendKeepaliveTime: 0,
    backendDialTimeout: 30_000,
    connectionStallTimeout: 60_000,
    gracefulShutdownTimeout: 0,
    logLevel: "silent",
    ...overrides,
  });
}
