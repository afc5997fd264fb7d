/**
 * The proxy-agent's options: one schema (types, defaults, rules, flags). Flag names shared with
 * the Go proxy-agent mean the same thing. The agent adds the checks of its destination rules
 * (`--allow-destinations`), which live with the destination policy.
 */
import { isIPv6 } from "node:net";
import { parseHostPort, validateAgentIdentifiers } from "@cluster-proxy/protocol";
import { clusterNameProblem } from "./cluster-name.js";
import { LOG_OPTION_FIELDS } from "./log-options.js";
import { AGENT_DOOR_PORT } from "./hub-names.js";
import {
  defineOptions,
  ENABLE_CONTENTION_PROFILING_FIELD,
  ENABLE_PROFILING_FIELD,
  opt,
  parseOptions,
  rules,
  type OptionsInputOf,
  type OptionsOf,
} from "./option-schema.js";
import { errorMessage } from "@cluster-proxy/errors";

/** The Go agent's identifier rules (`host=a&ipv4=1.2.3.4&...`). */
function identifiersProblem(ids: string): string | undefined {
  try {
    validateAgentIdentifiers(ids);
    return undefined;
  } catch (err) {
    return errorMessage(err);
  }
}

/** host:port, or a bare host (or bracketed IPv6 literal) whose requested port is kept. */
function apiserverAddressProblem(api: string): string | undefined {
  if (!api) return "must not be empty";
  if (parseHostPort(api)) return undefined;
  const bare = api.startsWith("[") && api.endsWith("]") ? isIPv6(api.slice(1, -1)) : !api.includes(":");
  return !bare || /[\s/]/.test(api) ? `"${api}" is neither host:port nor a host` : undefined;
}

/** An http(s) URL with a host and no path, query or credentials, or empty (the in-cluster default). */
function kubeApiserverUrlProblem(value: string): string | undefined {
  if (!value) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `${JSON.stringify(value)} is not a URL (e.g. https://10.96.0.1:443)`;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return `must be an http:// or https:// URL, got ${value}`;
  if (!url.hostname) return `has no host: ${value}`;
  if (url.username || url.password) return "must not hold credentials";
  if ((url.pathname !== "/" && url.pathname !== "") || url.search || url.hash) {
    return `must be scheme://host[:port] without a path or query, got ${value}`;
  }
  return undefined;
}

/** `<namespace>/<name>` (DNS names), or empty. */
function statusDeploymentProblem(value: string): string | undefined {
  if (!value) return undefined;
  const dns = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
  const parts = value.split("/");
  return parts.length === 2 && parts.every((p) => dns.test(p))
    ? undefined
    : `must be <namespace>/<deployment name>, got ${JSON.stringify(value)}`;
}

/**
 * The default prefix of the user and group names the gateway has the agents impersonate (the
 * gateway's `--impersonation-prefix`, the agent's `--gateway-impersonation-prefix`).
 */
export const DEFAULT_IMPERSONATION_PREFIX = "cluster:hub:";

/** The proxy-agent's option fields (in flag-reference order). */
const agentOptionFields = {
  proxyServerHost: opt.string(
    "127.0.0.1",
    {
      flag: "proxy-server-host",
      goCompatible: true,
      description: "Host of the proxy server's agent port (also the TLS server name)",
    },
    rules.nonEmpty(),
  ),
  proxyServerPort: opt.port(
    AGENT_DOOR_PORT,
    {
      flag: "proxy-server-port",
      goCompatible: true,
      description: "Agent port of the proxy server",
    },
    rules.port(false),
  ),
  caCert: opt.path(
    "",
    {
      flag: "ca-cert",
      goCompatible: true,
      description: "CA that the server certificate must chain to (PEM, required)",
    },
    rules.nonEmpty("is required (the CA the proxy server's certificate chains to)"),
  ),
  agentCert: opt.path("", {
    flag: "agent-cert",
    goCompatible: true,
    description: "Client certificate presented to the server (PEM)",
  }),
  agentKey: opt.path("", {
    flag: "agent-key",
    goCompatible: true,
    description: "Private key of --agent-cert (PEM)",
  }),
  serviceAccountTokenPath: opt.path("", {
    flag: "service-account-token-path",
    goCompatible: true,
    goDifference:
      "trailing line breaks in the file are dropped (the Go agent sends them, and grpc-go then refuses the header)",
    description:
      "Token file sent as 'authorization: Bearer <token>' on every connect (re-read each time), for servers using token auth",
  }),
  agentId: opt.string(
    "",
    {
      flag: "agent-id",
      env: "PROXY_AGENT_ID",
      goCompatible: true,
      description: "Unique ID of this agent (default: a random UUID)",
    },
    (id) => (id && !/^[\x21-\x7e]+$/.test(id) ? `"${id}" must be printable ASCII without spaces` : undefined),
  ),
  agentIdentifiers: opt.string(
    "",
    {
      flag: "agent-identifiers",
      goCompatible: true,
      description:
        "What this agent serves, as a query string: host=a&host=b&ipv4=1.2.3.4&ipv6=fd00::1&cidr=10.0.0.0/8&default-route=true",
    },
    identifiersProblem,
  ),
  clusterName: opt.string(
    "",
    {
      flag: "cluster-name",
      description:
        'Name of the cluster this agent serves: adds host=<name> to the identifiers and sends dials to <name>:<port> to --apiserver-address. As OCM accepts for a ManagedCluster: lowercase letters, digits and "-", at most 63 characters',
    },
    (name) => (name === "" ? undefined : clusterNameProblem(name)),
  ),
  apiserverAddress: opt.string(
    "kubernetes.default.svc:443",
    {
      flag: "apiserver-address",
      description:
        "Where a dial to <cluster-name>:<port> goes. With a port, exactly this address; without one, the requested port is kept",
    },
    apiserverAddressProblem,
  ),
  healthServerHost: opt.string("", {
    flag: "health-server-host",
    goCompatible: true,
    description: "Address the health port binds to (empty: all)",
  }),
  healthServerPort: opt.port(
    8093,
    {
      flag: "health-server-port",
      goCompatible: true,
      description: "Port serving /healthz, /readyz and /metrics (0 disables)",
    },
    rules.port(true),
  ),
  adminBindAddress: opt.string("127.0.0.1", {
    flag: "admin-bind-address",
    goCompatible: true,
    description: "Address the admin port binds to",
  }),
  adminServerPort: opt.port(
    8094,
    {
      flag: "admin-server-port",
      goCompatible: true,
      description: "Port serving /metrics for operators (0 disables)",
    },
    rules.port(true),
  ),
  syncInterval: opt.duration(
    1_000,
    {
      flag: "sync-interval",
      goCompatible: true,
      description:
        "How often to check that the agent holds a connection to every server, and the first reconnect delay",
    },
    rules.atLeastMs(1),
  ),
  syncIntervalCap: opt.duration(
    10_000,
    {
      flag: "sync-interval-cap",
      goCompatible: true,
      description: "Longest reconnect delay (jittered exponential backoff up to here)",
    },
    rules.atLeastMs(1),
  ),
  keepaliveTime: opt.duration(
    3_600_000,
    {
      flag: "keepalive-time",
      goCompatible: true,
      description:
        "Interval of keepalive pings to each server (Go servers refuse pings more often than every 30s). The Go default of 1h notices a silently vanished server late: 30s is a good value where the network may drop peers without a FIN",
    },
    rules.atLeastMs(0),
  ),
  keepaliveTimeout: opt.duration(
    10_000,
    {
      flag: "keepalive-timeout",
      description: "A server that does not answer a keepalive ping within this time is treated as dead",
    },
    rules.atLeastMs(1),
  ),
  hubKubeconfig: opt.path("", {
    flag: "hub-kubeconfig",
    description:
      "Reach the proxy-servers through the hub's kube-apiserver (entrypoint type PortForward) with this kubeconfig: the one OCM's registration agent writes for the addon (a client certificate of signer kubernetes.io/kube-apiserver-client). The agent learns the ready proxy-server pods from the EndpointSlices of --proxy-server-service in --proxy-server-namespace and holds one tunnel to each, through `pods/<pod>:<--proxy-server-port>/proxy` upgraded to the proxy-server's agent upgrade door; its mTLS to the proxy-server runs inside (--proxy-server-host is then only the TLS server name). Needs only `get` on pods/proxy and `list`/`watch` on endpointslices in that namespace",
  }),
  proxyServerNamespace: opt.string("", {
    flag: "proxy-server-namespace",
    description: "With --hub-kubeconfig: the hub namespace of the proxy-servers",
  }),
  proxyServerService: opt.string("", {
    flag: "proxy-server-service",
    description: "With --hub-kubeconfig: the proxy-servers' Service, whose EndpointSlices name the ready pods",
  }),
  httpsProxyCaCert: opt.path("", {
    flag: "https-proxy-ca-cert",
    description:
      "CA bundle (PEM) of an https:// forward proxy. The agent reaches the proxy server through the proxy in the HTTPS_PROXY environment variable (http:// or https://, user:password@ for Basic auth) unless NO_PROXY names the server's host (a name covers its subdomains; host:port, IPs and CIDRs work too)",
  }),
  handshakeTimeout: opt.duration(
    60_000,
    {
      flag: "handshake-timeout",
      description:
        "How long a connection to the proxy server that the server has accepted may take to finish its TLS handshake and answer the Connect stream. A busy server queues handshakes (--max-concurrent-handshakes) rather than failing them: waiting succeeds later, giving up and retrying only adds load. Reaching the server (TCP) is bounded by max(--keepalive-timeout, --dial-timeout)",
    },
    rules.atLeastMs(1),
  ),
  tcpKeepalive: opt.duration(
    30_000,
    {
      flag: "tcp-keepalive",
      description:
        "TCP keepalive on the connections to the proxy servers and to endpoints: idle time before the first probe; on Linux probes follow every second and a peer silent for 10 of them is dropped, so a server or endpoint that vanished without a FIN is noticed after about this plus 10s (0 disables)",
    },
    rules.atLeastMs(0),
  ),
  dialTimeout: opt.duration(
    5_000,
    {
      flag: "dial-timeout",
      description: "Timeout of dials to endpoints inside the cluster",
    },
    rules.atLeastMs(1),
  ),
  destinationPolicy: opt.path("", {
    flag: "destination-policy",
    description:
      'JSON file of what this agent may dial: {"allow": [rules], "deny": [rules]}, a rule being {"hosts": ["name", "*.suffix"], "cidrs": ["10.0.0.0/8", "fd00::/8"], "ports": [443, "8000-8999"]}. Empty (and no --allow-destinations): every destination is allowed except link-local/cloud metadata addresses and the agent\'s own ports on this host; --allow-destinations \'*\' allows everything, as in Go. See Security in the README',
  }),
  allowDestinations: opt.list([], {
    flag: "allow-destinations",
    description:
      "Comma list of allow rules added to --destination-policy, each <host pattern or CIDR>[:<port or range>], e.g. *.svc.cluster.local:443,10.96.0.0/12,[fd00::/8]:8000-8999. Any rule makes the policy closed: what no rule allows is refused. '*' alone (without --destination-policy) allows every destination, as the Go agent does",
  }),
  maxDials: opt.int(
    8192,
    {
      flag: "max-dials",
      description:
        "Most endpoint connections (dialling or open) the agent holds at once over all its server tunnels; a dial beyond it is answered with an error naming this flag (0: no limit). Bounds the agent's file descriptors",
    },
    (n) => (!Number.isInteger(n) || n < 0 ? `must be a non-negative integer, got ${n}` : undefined),
  ),
  maxDialsPerTunnel: opt.int(
    4096,
    {
      flag: "max-dials-per-tunnel",
      description:
        "Most endpoint connections (dialling or open) one server tunnel may hold at once, so the clients of one proxy server cannot take all of --max-dials; a dial beyond it is answered with an error naming this flag (0: no limit)",
    },
    (n) => (!Number.isInteger(n) || n < 0 ? `must be a non-negative integer, got ${n}` : undefined),
  ),
  connectionStallTimeout: opt.duration(
    60_000,
    {
      flag: "connection-stall-timeout",
      description:
        "Close a tunnelled connection whose endpoint, with more than its 4 MiB buffer budget waiting, reads nothing for this long (0 never closes; docs/design/flow-control.md)",
    },
    rules.atLeastMs(0),
  ),
  drainGracePeriod: opt.duration(30_000, {
    flag: "drain-grace-period",
    description:
      "After the first SIGTERM (which sends DRAIN), exit once idle or after this long; a second signal exits at once",
  }),
  certReloadInterval: opt.duration(
    10_000,
    {
      flag: "cert-reload-interval",
      description:
        "How often to re-read --ca-cert/--agent-cert/--agent-key and --gateway-ca-file (by content, so Kubernetes Secret volumes work; each connection attempt re-reads them too). New files that check out are used from the next connection attempt, established tunnels keep running; a bad file is refused and logged, the old certificates stay (0: only at connection attempts)",
    },
    rules.atLeastMs(0),
  ),
  statusDeployment: opt.string(
    "",
    {
      flag: "status-deployment",
      description:
        "<namespace>/<name> of the agent's own Deployment: the agent writes its connection to the proxy-servers, with its last connection error, as status condition ProxyAgentConnected there (with the pod's service account; needs only patch on that deployments/status), so the hub can show why agents cannot connect. Empty: not written",
    },
    statusDeploymentProblem,
  ),
  gatewayCaFile: opt.path("", {
    flag: "gateway-ca-file",
    description:
      "CA bundle (PEM) of the gateway's identity certificates. Set, the agent serves the gateway endpoint in-process at the reserved dial address gateway.cluster-proxy.invalid (mutual TLS with --agent-cert/--agent-key, a client certificate from this CA required; requests are forwarded to the kube-apiserver as the identity the gateway names, impersonated with the agent's ServiceAccount, or to a Service). Re-read every --cert-reload-interval. Empty: the endpoint is disabled and dials to the reserved address are refused",
  }),
  gatewayImpersonationPrefix: opt.string(
    DEFAULT_IMPERSONATION_PREFIX,
    {
      flag: "gateway-impersonation-prefix",
      description:
        "The gateway's --impersonation-prefix: the gateway endpoint serves a kube-apiserver request only when its Impersonate-User and every Impersonate-Group start with it (the one unprefixed group allowed is system:authenticated) and refuses it with 400 otherwise, so the gateway's identity certificate can only act as hub identities. Must equal the gateway's (the addon manager renders it from the same setting)",
    },
    (v) => (v === "" ? "must not be empty (without a prefix, hub names could pose as the cluster's own)" : undefined),
  ),
  serviceCaFile: opt.path("", {
    flag: "service-ca-file",
    description:
      "Extra CA bundle (PEM) the gateway endpoint trusts, besides the ServiceAccount ca.crt, when it forwards to an https:// Service (e.g. the cluster's service-serving CA)",
  }),
  kubeApiserverUrl: opt.string(
    "",
    {
      flag: "kube-apiserver-url",
      description:
        "Where the gateway endpoint forwards kube-apiserver requests (scheme://host[:port]). Empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (in-cluster); TLS is verified against the ServiceAccount ca.crt",
    },
    kubeApiserverUrlProblem,
  ),
  serviceAccountDir: opt.path("/var/run/secrets/kubernetes.io/serviceaccount", {
    flag: "service-account-dir",
    description:
      "Directory of the agent's ServiceAccount token (token, re-read when it rotates) and cluster CA (ca.crt), with which the gateway endpoint forwards impersonated requests to the kube-apiserver",
  }),
  enableProfiling: ENABLE_PROFILING_FIELD,
  alpnProto: opt.list([], {
    flag: "alpn-proto",
    goCompatible: true,
    description:
      "Additional ALPN protocols offered when connecting to the server (before h2), to tell proxy and apiserver connections apart on a shared address",
  }),
  probeInterval: opt.duration(1_000, {
    flag: "probe-interval",
    description: "Go: how often the agent checks that its server connections are ready",
    goNote: "accepted, no effect: ours computes /readyz from the live connections on each request",
  }),
  syncForever: opt.boolean(false, {
    flag: "sync-forever",
    description: "Go: keep syncing after connecting to every server, to follow server count changes",
    goNote:
      "accepted; ours always keeps syncing every --sync-interval (as Go with true), so a changed servercount is followed either way",
  }),
  countServerLeases: opt.boolean(false, {
    flag: "count-server-leases",
    description: "Go: count proxy-server Leases to learn the number of servers",
    unsupported: "the agent learns the server count from the servers' servercount header only",
  }),
  serverCountSource: opt.choice(["default", "max"] as const, "default", {
    flag: "server-count-source",
    description: "Go: how Lease and server counts combine (default or max)",
    goNote: "accepted, no effect: without Lease counting the servers' count is the only source",
  }),
  kubeconfig: opt.path("", {
    flag: "kubeconfig",
    description: "Go: kubeconfig for Lease counting",
    goNote: "accepted, no effect: only used by --count-server-leases, which is refused",
  }),
  leaseNamespace: opt.string("kube-system", {
    flag: "lease-namespace",
    description: "Go: namespace of the proxy-server Leases",
    goNote: "accepted, no effect: only used by --count-server-leases, which is refused",
  }),
  leaseLabel: opt.string("k8s-app=konnectivity-server", {
    flag: "lease-label",
    description: "Go: labels of the proxy-server Leases",
    goNote: "accepted, no effect: only used by --count-server-leases, which is refused",
  }),
  kubeApiContentType: opt.string("application/vnd.kubernetes.protobuf", {
    flag: "kube-api-content-type",
    description: "Go: content type of requests sent to the apiserver",
    goNote: "accepted, no effect: the agent's one apiserver request (--status-deployment) is a JSON patch",
  }),
  enableContentionProfiling: ENABLE_CONTENTION_PROFILING_FIELD,
  xfrChannelSize: opt.int(
    150,
    {
      flag: "xfr-channel-size",
      description: "Go: size of the agent's packet channel",
      goNote:
        "accepted (must be positive), no effect: ours has no packet channel; each connection has its own flow-control budget (docs/design/flow-control.md)",
    },
    (n) => (n <= 0 ? `must be positive, got ${n}` : undefined),
  ),
  warnOnChannelLimit: opt.boolean(false, {
    flag: "warn-on-channel-limit",
    description: "Go: warn when pushing to a full channel",
    goNote: "accepted, no effect: ours has no packet channel",
  }),
  ...LOG_OPTION_FIELDS,
};

/** The rules between the proxy-agent's options. */
function agentCrossRules(o: AgentOptions, bad: (key: Extract<keyof AgentOptions, string>, why: string) => void): void {
  if (Boolean(o.agentCert) !== Boolean(o.agentKey)) {
    bad(o.agentCert ? "agentKey" : "agentCert", "--agent-cert and --agent-key must be given together");
  }
  if (o.gatewayCaFile && !o.agentCert) {
    bad("gatewayCaFile", "needs --agent-cert and --agent-key (the gateway endpoint serves with the agent certificate)");
  }
  if (o.syncIntervalCap < o.syncInterval) bad("syncIntervalCap", "must not be below --sync-interval");
  if (o.hubKubeconfig) {
    if (!o.proxyServerNamespace) bad("proxyServerNamespace", "is required with --hub-kubeconfig");
    if (!o.proxyServerService) bad("proxyServerService", "is required with --hub-kubeconfig");
  } else {
    if (o.proxyServerNamespace) bad("proxyServerNamespace", "is only used with --hub-kubeconfig");
    if (o.proxyServerService) bad("proxyServerService", "is only used with --hub-kubeconfig");
  }
}

/** The proxy-agent's option schema. */
export const agentOptionsSchema = defineOptions(agentOptionFields, agentCrossRules);

/** The proxy-agent's flags (help, README reference, Go compatibility table). */
export const agentOptionSpecs = agentOptionsSchema.specs;

/** The proxy-agent's options, validated, every default applied. */
export type AgentOptions = OptionsOf<typeof agentOptionFields>;
/** What a caller may give the proxy-agent (options with a default may be left out). */
export type AgentOptionsInput = OptionsInputOf<typeof agentOptionFields>;

/**
 * Validate agent options and apply the defaults, without touching files. Throws one ConfigError
 * naming every flag at fault (all of them, so a user fixes them in one go); `extra` adds the
 * problems of checks that live elsewhere (the agent's destination rules).
 */
export function parseAgentOptions(
  input: AgentOptionsInput,
  extra: (o: AgentOptions) => string[] = () => [],
): AgentOptions {
  return parseOptions(agentOptionsSchema, input, extra);
}
