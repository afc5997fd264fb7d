/**
 * The kubeconfig `cluster-proxy kubeconfig --gateway` writes (docs/design/gateway.md,
 * docs/guides/hub-operations.md): one cluster entry per managed cluster whose server is
 * `https://<gateway>/<cluster>`, verified against the serving CA bundle the addon manager publishes
 * in Secret `cluster-proxy-gateway-serving` (`ca.crt`), with `tls-server-name` when the URL's host
 * is not a name of the gateway's certificate (a port-forward to 127.0.0.1, a load balancer's
 * address), and one user: the caller's own hub credentials, which the gateway authenticates
 * against the hub (TokenReview, or OIDC) before the cluster's agent performs the request as them.
 */
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { ConfigError } from "@cluster-proxy/api";
import type { KubeconfigUser } from "./kubeconfig-builder.js";

/** Name of the single user entry of a gateway kubeconfig. */
export const GATEWAY_USER = "hub-user";

/** The gateway's in-cluster URL: its Service `service` in namespace `ns`, port `port` (the chart's 9092). */
export function defaultGatewayUrl(service: string, ns: string, port: number): string {
  return `https://${service}.${ns}.svc:${port}`;
}

/**
 * `--gateway <url>` checked: https, no user, query or fragment; a path is kept as a prefix (a
 * gateway behind a path-routing ingress).
 */
export function parseGatewayUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError(`--gateway: "${text}" is not a URL (e.g. https://127.0.0.1:9092)`);
  }
  if (url.protocol !== "https:") throw new ConfigError(`--gateway: "${text}" must be an https:// URL`);
  if (url.username || url.password || url.search || url.hash)
    throw new ConfigError(`--gateway: "${text}" must have no user, query or fragment`);
  return url;
}

/** The server of `cluster` behind the gateway at `gateway`. */
export function gatewayServer(gateway: URL, cluster: string): string {
  return `${gateway.origin}${gateway.pathname.replace(/\/+$/, "")}/${cluster}`;
}

/**
 * The `tls-server-name` kubectl must verify the gateway as: undefined when the URL's host is a name
 * (or IP address) of the serving certificate `certPem`, else `fallback` (the Service's
 * `<service>.<namespace>.svc`, which the certificate always names).
 */
export function gatewayTlsServerName(gateway: URL, certPem: string, fallback: string): string | undefined {
  const host = gateway.hostname.replace(/^\[(.*)\]$/, "$1");
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certPem);
  } catch {
    return host === fallback ? undefined : fallback;
  }
  const covered = isIP(host) !== 0 ? cert.checkIP(host) !== undefined : cert.checkHost(host) !== undefined;
  return covered ? undefined : fallback;
}

/** What a gateway kubeconfig is made of. */
export interface GatewayKubeconfigInput {
  gateway: URL;
  /** The managed clusters, one context each (named after the cluster). */
  clusters: readonly string[];
  /** The context to make current (one of `clusters`). */
  currentContext: string;
  /** PEM: the serving CA bundle that verifies the gateway. */
  servingCa: Buffer;
  tlsServerName?: string;
  /** The caller's hub credentials (token, exec plugin, client certificate, ...). */
  user: KubeconfigUser;
}

/** The kubeconfig document (for `dumpYaml`). */
export function buildGatewayKubeconfig(input: GatewayKubeconfigInput): Record<string, unknown> {
  const ca = input.servingCa.toString("base64");
  return {
    apiVersion: "v1",
    kind: "Config",
    clusters: input.clusters.map((name) => ({
      name,
      cluster: {
        server: gatewayServer(input.gateway, name),
        "certificate-authority-data": ca,
        ...(input.tlsServerName ? { "tls-server-name": input.tlsServerName } : {}),
      },
    })),
    users: [{ name: GATEWAY_USER, user: input.user }],
    contexts: input.clusters.map((name) => ({ name, context: { cluster: name, user: GATEWAY_USER } })),
    "current-context": input.currentContext,
  };
}
