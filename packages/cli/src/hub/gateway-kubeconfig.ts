/**
 * The kubeconfig `cluster-proxy kubeconfig --gateway` writes: one cluster entry per managed cluster and
 * the caller's own hub credentials, through the aggregated path or a direct gateway URL.
 * Guide: docs/guides/hub-operations.md#cluster-proxy-kubeconfig---gatewayurl-as-yourself-through-the-gateway
 */
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { aggregatedClusterPath, ConfigError } from "@cluster-proxy/api";
import type { KubeconfigCluster, KubeconfigUser } from "./kubeconfig-builder.js";

/** Name of the single user entry of a gateway kubeconfig. */
export const GATEWAY_USER = "hub-user";

/** The gateway's in-cluster URL: its Service `service` in namespace `ns`, port `port` (the chart's 9092). */
export function defaultGatewayUrl(service: string, ns: string, port: number): string {
  return `https://${service}.${ns}.svc:${port}`;
}

/** Which way `--gateway` goes: the hub apiserver's aggregated path, or the gateway's own port. */
export type GatewayRoute = { kind: "aggregated" } | { kind: "direct"; url?: URL };

/**
 * `--gateway[=aggregated|direct|<url>]`: bare or `aggregated`, the aggregated path; `direct`, the
 * gateway's Service URL; an https URL, that gateway.
 */
export function parseGatewayRoute(value: string | true): GatewayRoute {
  if (value === true || value === "aggregated") return { kind: "aggregated" };
  if (value === "direct") return { kind: "direct" };
  return { kind: "direct", url: parseGatewayUrl(value) };
}

/** The server of `cluster` through the aggregated path of the hub apiserver at `hubServer`. */
export function aggregatedServer(hubServer: string, cluster: string): string {
  return `${hubServer.replace(/\/+$/, "")}${aggregatedClusterPath(cluster)}`;
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
  /** The cluster entry of each managed cluster (its `server` and how to verify it). */
  cluster: (name: string) => KubeconfigCluster;
  /** The managed clusters, one context each (named after the cluster). */
  clusters: readonly string[];
  /** The context to make current (one of `clusters`). */
  currentContext: string;
  /** The caller's hub credentials (token, exec plugin, client certificate, ...). */
  user: KubeconfigUser;
}

/** The cluster entries of the direct path: `gateway`, verified with the serving CA bundle. */
export function directGatewayCluster(
  gateway: URL,
  servingCa: Buffer,
  tlsServerName: string | undefined,
): (name: string) => KubeconfigCluster {
  return (name) => ({
    server: gatewayServer(gateway, name),
    "certificate-authority-data": servingCa.toString("base64"),
    ...(tlsServerName ? { "tls-server-name": tlsServerName } : {}),
  });
}

/** The cluster entries of the aggregated path: the hub kubeconfig's cluster, at each cluster's path. */
export function aggregatedGatewayCluster(hub: KubeconfigCluster): (name: string) => KubeconfigCluster {
  return (name) => ({ ...hub, server: aggregatedServer(hub.server, name) });
}

/** The kubeconfig document (for `dumpYaml`). */
export function buildGatewayKubeconfig(input: GatewayKubeconfigInput): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Config",
    clusters: input.clusters.map((name) => ({ name, cluster: input.cluster(name) })),
    users: [{ name: GATEWAY_USER, user: input.user }],
    contexts: input.clusters.map((name) => ({ name, context: { cluster: name, user: GATEWAY_USER } })),
    "current-context": input.currentContext,
  };
}
