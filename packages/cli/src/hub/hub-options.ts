/**
 * The option schemas of the hub operations (`health`, `kubeconfig`, `port-forward`, `relay`,
 * `credential`): one declaration per flag, from which come the parsing, the errors naming the
 * flag, `--help` and the flag reference (flag-reference.ts), as for the components' schemas.
 */
import {
  ADDON_NAME,
  CONNECT_DOOR_PORT,
  GATEWAY_PORT,
  GATEWAY_TOKEN_AUDIENCE,
  GRPC_DOOR_PORT,
  clusterNameProblem,
  defineOptions,
  opt,
  rules,
  type OptionsOf,
  type ValueRule,
} from "@cluster-proxy/api";
import { OUTPUT_FORMATS } from "./health-report.js";
import { VIA_CHOICES } from "./hub-access.js";
import { DEFAULT_STATE_DIR, PROFILE_FILE } from "../up/local-hub.js";

/** Why a list of cluster names is not (each problem names the cluster). */
const clusterNames: ValueRule<string[]> = (names) =>
  names.map(clusterNameProblem).filter((p): p is string => p !== undefined);
/** Why a cluster name is not (an empty one is left to the command: some take none). */
const clusterName: ValueRule<string> = (name) => (name === "" ? undefined : clusterNameProblem(name));

const kubeconfigField = (description: string) =>
  opt.optional(opt.path("", { flag: "kubeconfig", valueName: "file", description }));

const HUB_KUBECONFIG = "hub kubeconfig (default: $KUBECONFIG, then the in-cluster service account)";

const configurationField = opt.string(ADDON_NAME, {
  flag: "configuration",
  valueName: "name",
  description: "the ManagedProxyConfiguration",
});

/** The hub-access flags (clusteradm's names); `door` names the port that --proxy-server-port means. */
function hubOptionFields(door: "grpc" | "connect") {
  const port = door === "grpc" ? GRPC_DOOR_PORT : CONNECT_DOOR_PORT;
  return {
    kubeconfig: kubeconfigField(HUB_KUBECONFIG),
    configuration: configurationField,
    proxyServerHost: opt.optional(
      opt.string("", {
        flag: "proxy-server-host",
        valueName: "host",
        description:
          "where the proxy-servers are reachable (default: the ingress of a LoadBalancer Service in the proxy-server namespace exposing the door, else <service>.<namespace>.svc inside the hub)",
      }),
    ),
    proxyServerPort: opt.optional(
      opt.port(
        port,
        {
          flag: "proxy-server-port",
          valueName: "port",
          description: `port of the ${door === "grpc" ? "gRPC client door (--server-port)" : "HTTP CONNECT door (--http-connect-port)"} (default: ${port}, or the LoadBalancer's port for it)`,
        },
        rules.port(false),
      ),
    ),
    proxyServerName: opt.optional(
      opt.string("", {
        flag: "proxy-server-name",
        valueName: "name",
        description:
          "TLS name to verify the proxy-server as (default: --proxy-server-host, or <service>.<namespace>.svc for a door found through a LoadBalancer Service; the serving certificate carries <service>.<namespace>.svc, localhost, 127.0.0.1 and additionalSANs)",
      }),
    ),
    inClusterProxyCertLookup: opt.boolean(true, {
      flag: "in-cluster-proxy-cert-lookup",
      description:
        "read the client certificate and the proxy-servers' CA from the hub (Secrets proxy-client and proxy-server-ca in the proxy-server namespace) when --proxy-ca-cert/--proxy-cert/--proxy-key are not given",
    }),
    proxyCaCert: opt.optional(
      opt.path("", {
        flag: "proxy-ca-cert",
        valueName: "file",
        description: "CA bundle that verifies the proxy-server (PEM)",
      }),
    ),
    proxyCert: opt.optional(
      opt.path("", {
        flag: "proxy-cert",
        valueName: "file",
        description: "client certificate for the proxy-server's client doors (PEM)",
      }),
    ),
    proxyKey: opt.optional(
      opt.path("", { flag: "proxy-key", valueName: "file", description: "key of --proxy-cert (PEM)" }),
    ),
    via: opt.choice(VIA_CHOICES, "auto", {
      flag: "via",
      valueName: "route",
      description:
        "how to reach the proxy-servers: apiserver (a port-forward through the hub kube-apiserver to a Ready proxy-server pod, as clusteradm does; needs list pods and create pods/portforward in the proxy-server namespace), direct (--proxy-server-host, a LoadBalancer Service, or the in-cluster Service name), or auto (direct when --proxy-server-host is given, a LoadBalancer Service exposes the door, or the Service name resolves here; else apiserver)",
    }),
    hubProfile: opt.optional(
      opt.path("", {
        flag: "hub-profile",
        valueName: "file",
        description: `the local hub of "cluster-proxy up" to use (default: ./${DEFAULT_STATE_DIR}/${PROFILE_FILE} when it exists and neither --kubeconfig nor --proxy-server-host is given)`,
      }),
    ),
  };
}

/** `cluster-proxy health`. */
export const healthOptionsSchema = defineOptions({
  cluster: opt.list(
    [],
    { flag: "cluster", valueName: "name", description: "only this cluster (repeat, or separate with commas)" },
    clusterNames,
  ),
  output: opt.choice(OUTPUT_FORMATS, "table", {
    flag: "output",
    short: "o",
    valueName: "format",
    description: "output format",
  }),
  timeout: opt.duration(
    10_000,
    { flag: "timeout", valueName: "duration", description: "per-cluster probe timeout (e.g. 10s, 500ms)" },
    (ms) => (ms <= 0 ? "must be more than 0" : undefined),
  ),
  probePath: opt.string(
    "/healthz",
    { flag: "probe-path", valueName: "path", description: "apiserver path to probe (/healthz or /readyz)" },
    (path) => (path.startsWith("/") ? undefined : `"${path}" must start with /`),
  ),
  parallel: opt.int(32, { flag: "parallel", valueName: "n", description: "probes at a time" }, (n) =>
    n < 1 ? `${n} is not a positive integer` : undefined,
  ),
  ...hubOptionFields("grpc"),
});
export type HealthOptions = OptionsOf<typeof healthOptionsSchema.fields>;

/** `cluster-proxy kubeconfig`. */
export const kubeconfigOptionsSchema = defineOptions({
  cluster: opt.optional(
    opt.string(
      "",
      {
        flag: "cluster",
        valueName: "name",
        description: "the managed cluster (with --gateway: only this one; default every ManagedCluster)",
      },
      clusterNameProblem,
    ),
  ),
  gateway: opt.optional(
    opt.string("", {
      flag: "gateway",
      valueName: "aggregated|direct|url",
      bareValue: "aggregated",
      description:
        "through the gateway instead, as yourself with your hub credentials: bare or aggregated, through the hub apiserver (the gateway's aggregated API); direct, its Service https://cluster-proxy-addon-user.<namespace>.svc:9092; or the https URL of the gateway",
    }),
  ),
  credentialsFrom: opt.optional(
    opt.path("", {
      flag: "credentials-from",
      valueName: "kubeconfig",
      description:
        "copy the current user of this kubeconfig (token, exec plugin, ...; with --gateway: your hub user, default the hub kubeconfig's)",
    }),
  ),
  token: opt.optional(
    opt.string("", {
      flag: "token",
      valueName: "token",
      description: "a bearer token for the managed cluster (with --gateway: for the hub)",
    }),
  ),
  managedServiceAccount: opt.optional(
    opt.string("", {
      flag: "managed-service-account",
      valueName: "name",
      description: "use the token of this ManagedServiceAccount (hub Secret <name> in the cluster's namespace)",
    }),
  ),
  output: opt.optional(
    opt.path("", {
      flag: "output",
      short: "o",
      valueName: "file",
      description: "write here (mode 0600) instead of standard output",
    }),
  ),
  clusterCaCert: opt.optional(
    opt.path("", {
      flag: "cluster-ca-cert",
      valueName: "file",
      description:
        "CA bundle of the cluster's kube-apiserver (default: from its ManagedCluster); with --proxy-server-host and the --proxy-* files no hub is read",
    }),
  ),
  relayPort: opt.port(
    CONNECT_DOOR_PORT,
    {
      flag: "relay-port",
      valueName: "port",
      description: 'through the hub kube-apiserver: the local port of "cluster-proxy relay" the proxy URL names',
    },
    rules.port(false),
  ),
  ...hubOptionFields("connect"),
});
export type KubeconfigOptions = OptionsOf<typeof kubeconfigOptionsSchema.fields>;

/** `cluster-proxy port-forward`. */
export const portForwardOptionsSchema = defineOptions({
  cluster: opt.string(
    "",
    { flag: "cluster", valueName: "name", description: "the managed cluster (required)" },
    rules.nonEmpty("required (the managed cluster)"),
    clusterName,
  ),
  address: opt.string("127.0.0.1", { flag: "address", valueName: "ip", description: "local address to listen on" }),
  ...hubOptionFields("grpc"),
});
export type PortForwardOptions = OptionsOf<typeof portForwardOptionsSchema.fields>;

/** The doors `relay --door` names. */
export const RELAY_DOORS = ["connect", "grpc", "gateway"] as const;

/** `cluster-proxy relay`. */
export const relayOptionsSchema = defineOptions({
  kubeconfig: kubeconfigField(HUB_KUBECONFIG),
  configuration: configurationField,
  door: opt.choice(RELAY_DOORS, "connect", {
    flag: "door",
    valueName: "door",
    description: `the door: connect (the proxy-servers' HTTP CONNECT, ${CONNECT_DOOR_PORT}), grpc (their gRPC client door, ${GRPC_DOOR_PORT}) or gateway (the gateway's port, ${GATEWAY_PORT})`,
  }),
  address: opt.string("127.0.0.1", { flag: "address", valueName: "ip", description: "local address to listen on" }),
  port: opt.optional(
    opt.port(
      0,
      {
        flag: "port",
        valueName: "port",
        description: "local port (default: the door's port; 0 picks a free one)",
      },
      rules.port(true),
    ),
  ),
});
export type RelayOptions = OptionsOf<typeof relayOptionsSchema.fields>;

/** The shortest lifetime the apiserver grants a TokenRequest. */
const MIN_EXPIRATION_MS = 600_000;

/** `cluster-proxy credential`. */
export const credentialOptionsSchema = defineOptions({
  kubeconfig: kubeconfigField("hub kubeconfig for the TokenRequest (default: $KUBECONFIG, then in-cluster)"),
  serviceAccount: opt.optional(
    opt.string("", {
      flag: "service-account",
      valueName: "namespace/name",
      description:
        "the hub ServiceAccount to request a token for (default: the kubeconfig's or the pod's own ServiceAccount)",
    }),
  ),
  tokenFile: opt.optional(
    opt.path("", {
      flag: "token-file",
      valueName: "file",
      description: "print the token in this file instead (re-read on every call; no hub request)",
    }),
  ),
  expiration: opt.duration(
    3_600_000,
    { flag: "expiration", valueName: "duration", description: "lifetime of a requested token (at least 10m)" },
    (ms) => (ms < MIN_EXPIRATION_MS ? "at least 10m (the apiserver's minimum)" : undefined),
  ),
  audience: opt.list([], {
    flag: "audience",
    valueName: "audience",
    description: `audience of the requested token; repeatable (default: ${GATEWAY_TOKEN_AUDIENCE}; set it to one of the gateway's --token-audiences)`,
  }),
});
export type CredentialOptions = OptionsOf<typeof credentialOptionsSchema.fields>;
