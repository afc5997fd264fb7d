// The hub's gRPC front door as a program in the test environment reaches it: a TunnelClient (our
// SDK) with the proxy-client certificate from a Secret-like directory (ca.crt, tls.crt, tls.key, as
// the proxy-client Secret's keys are written to files). Used by the probes that the environment
// suites run in the lab namespace and by the port-forward benchmark's client.
import { join } from "node:path";
import { TunnelClient, type TunnelClientOptions, loadProxyTls } from "@cluster-proxy/client";

/**
 * A TunnelClient to `address` ("host:port") whose server certificate is checked for `servername`,
 * with the CA, certificate and key of `certDir` (its ca.crt, tls.crt and tls.key). Throws a
 * ConfigError naming the file that cannot be read, and an Error for an address without a port.
 */
export function tunnelClientFromCertDir(
  address: string,
  servername: string,
  certDir: string,
  options: Omit<TunnelClientOptions, "proxy"> = {},
): TunnelClient {
  const m = /^(.+):(\d+)$/.exec(address);
  if (!m) throw new Error(`proxy address ${JSON.stringify(address)}: want host:port`);
  return new TunnelClient({
    ...options,
    proxy: {
      host: m[1],
      port: Number(m[2]),
      servername,
      ...loadProxyTls({
        caFile: join(certDir, "ca.crt"),
        certFile: join(certDir, "tls.crt"),
        keyFile: join(certDir, "tls.key"),
      }),
    },
  });
}
