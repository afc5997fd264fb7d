/** The proxy-agent's options. Flag names shared with the Go proxy-agent mean the same thing. */
import { LOG_OPTION_SPECS, type LogOptions } from "./log-options.js";
import { ENABLE_CONTENTION_PROFILING_SPEC, ENABLE_PROFILING_SPEC, type OptionSpec } from "./options.js";

/** Default `--handshake-timeout`. */
export const DEFAULT_AGENT_HANDSHAKE_TIMEOUT_MS = 60_000;

export interface AgentOptions extends LogOptions {
  proxyServerHost: string;
  proxyServerPort: number;
  caCert: string;
  agentCert: string;
  agentKey: string;
  serviceAccountTokenPath: string;
  agentId: string;
  agentIdentifiers: string;
  clusterName: string;
  apiserverAddress: string;
  healthServerHost: string;
  healthServerPort: number;
  adminBindAddress: string;
  adminServerPort: number;
  syncInterval: number;
  syncIntervalCap: number;
  keepaliveTime: number;
  keepaliveTimeout: number;
  dialTimeout: number;
  /** Optional; undefined means {@link DEFAULT_AGENT_HANDSHAKE_TIMEOUT_MS}. */
  handshakeTimeout?: number;
  connectionStallTimeout: number;
  /** Optional so callers written before it keep compiling; undefined or "" means no policy file. */
  destinationPolicy?: string;
  /** Optional; undefined or [] adds no allow rule. */
  allowDestinations?: string[];
  drainGracePeriod: number;
  /** Optional; undefined means 10 s. 0 disables polling (each connection attempt still re-reads the files). */
  certReloadInterval?: number;
  /** Optional; undefined means off. */
  enableProfiling?: boolean;
  /** Extra ALPN protocols offered before `h2`. */
  alpnProto?: string[];
  /** Optional; undefined or "" trusts Node's roots for an https:// HTTPS_PROXY. */
  httpsProxyCaCert?: string;
}

export const agentOptionSpecs: readonly OptionSpec[] = [
  {
    key: "proxyServerHost",
    flag: "proxy-server-host",
    kind: "string",
    default: "127.0.0.1",
    goCompatible: true,
    description: "Host of the proxy server's agent port (also the TLS server name)",
  },
  {
    key: "proxyServerPort",
    flag: "proxy-server-port",
    kind: "port",
    default: 8091,
    goCompatible: true,
    description: "Agent port of the proxy server",
  },
  {
    key: "caCert",
    flag: "ca-cert",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "CA that the server certificate must chain to (PEM, required)",
  },
  {
    key: "agentCert",
    flag: "agent-cert",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Client certificate presented to the server (PEM)",
  },
  {
    key: "agentKey",
    flag: "agent-key",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Private key of --agent-cert (PEM)",
  },
  {
    key: "serviceAccountTokenPath",
    flag: "service-account-token-path",
    kind: "path",
    default: "",
    goCompatible: true,
    goDifference:
      "trailing line breaks in the file are dropped (the Go agent sends them, and grpc-go then refuses the header)",
    description:
      "Token file sent as 'authorization: Bearer <token>' on every connect (re-read each time), for servers using token auth",
  },
  {
    key: "agentId",
    flag: "agent-id",
    kind: "string",
    default: "",
    env: "PROXY_AGENT_ID",
    goCompatible: true,
    description: "Unique ID of this agent (default: a random UUID)",
  },
  {
    key: "agentIdentifiers",
    flag: "agent-identifiers",
    kind: "string",
    default: "",
    goCompatible: true,
    description:
      "What this agent serves, as a query string: host=a&host=b&ipv4=1.2.3.4&ipv6=fd00::1&cidr=10.0.0.0/8&default-route=true",
  },
  {
    key: "clusterName",
    flag: "cluster-name",
    kind: "string",
    default: "",
    description:
      "Name of the cluster this agent serves: adds host=<name> to the identifiers and sends dials to <name>:<port> to --apiserver-address",
  },
  {
    key: "apiserverAddress",
    flag: "apiserver-address",
    kind: "string",
    default: "kubernetes.default.svc:443",
    description:
      "Where a dial to <cluster-name>:<port> goes. With a port, exactly this address; without one, the requested port is kept",
  },
  {
    key: "healthServerHost",
    flag: "health-server-host",
    kind: "string",
    default: "",
    goCompatible: true,
    description: "Address the health port binds to (empty: all)",
  },
  {
    key: "healthServerPort",
    flag: "health-server-port",
    kind: "port",
    default: 8093,
    goCompatible: true,
    description: "Port serving /healthz, /readyz and /metrics (0 disables)",
  },
  {
    key: "adminBindAddress",
    flag: "admin-bind-address",
    kind: "string",
    default: "127.0.0.1",
    goCompatible: true,
    description: "Address the admin port binds to",
  },
  {
    key: "adminServerPort",
    flag: "admin-server-port",
    kind: "port",
    default: 8094,
    goCompatible: true,
    description: "Port serving /metrics for operators (0 disables)",
  },
  {
    key: "syncInterval",
    flag: "sync-interval",
    kind: "duration",
    default: 1_000,
    goCompatible: true,
    description: "How often to check that the agent holds a connection to every server, and the first reconnect delay",
  },
  {
    key: "syncIntervalCap",
    flag: "sync-interval-cap",
    kind: "duration",
    default: 10_000,
    goCompatible: true,
    description: "Longest reconnect delay (jittered exponential backoff up to here)",
  },
  {
    key: "keepaliveTime",
    flag: "keepalive-time",
    kind: "duration",
    default: 3_600_000,
    goCompatible: true,
    description:
      "Interval of keepalive pings to each server (Go servers refuse pings more often than every 30s). The Go default of 1h notices a silently vanished server late: 30s is a good value where the network may drop peers without a FIN",
  },
  {
    key: "keepaliveTimeout",
    flag: "keepalive-timeout",
    kind: "duration",
    default: 10_000,
    description: "A server that does not answer a keepalive ping within this time is treated as dead",
  },
  {
    key: "httpsProxyCaCert",
    flag: "https-proxy-ca-cert",
    kind: "path",
    default: "",
    description:
      "CA bundle (PEM) of an https:// forward proxy. The agent reaches the proxy server through the proxy in the HTTPS_PROXY environment variable (http:// or https://, user:password@ for Basic auth) unless NO_PROXY names the server's host (a name covers its subdomains; host:port, IPs and CIDRs work too)",
  },
  {
    key: "handshakeTimeout",
    flag: "handshake-timeout",
    kind: "duration",
    default: DEFAULT_AGENT_HANDSHAKE_TIMEOUT_MS,
    description:
      "How long a connection to the proxy server that the server has accepted may take to finish its TLS handshake and answer the Connect stream. A busy server queues handshakes (--max-concurrent-handshakes) rather than failing them: waiting succeeds later, giving up and retrying only adds load. Reaching the server (TCP) is bounded by max(--keepalive-timeout, --dial-timeout)",
  },
  {
    key: "dialTimeout",
    flag: "dial-timeout",
    kind: "duration",
    default: 5_000,
    description: "Timeout of dials to endpoints inside the cluster",
  },
  {
    key: "destinationPolicy",
    flag: "destination-policy",
    kind: "path",
    default: "",
    description:
      'JSON file of what this agent may dial: {"allow": [rules], "deny": [rules]}, a rule being {"hosts": ["name", "*.suffix"], "cidrs": ["10.0.0.0/8", "fd00::/8"], "ports": [443, "8000-8999"]}. Empty (and no --allow-destinations): every destination is allowed, as in Go. See Security in the README',
  },
  {
    key: "allowDestinations",
    flag: "allow-destinations",
    kind: "list",
    default: [],
    description:
      "Comma list of allow rules added to --destination-policy, each <host pattern or CIDR>[:<port or range>], e.g. *.svc.cluster.local:443,10.96.0.0/12,[fd00::/8]:8000-8999. Any rule makes the policy closed: what no rule allows is refused",
  },
  {
    key: "connectionStallTimeout",
    flag: "connection-stall-timeout",
    kind: "duration",
    default: 60_000,
    description:
      "Close a tunnelled connection whose endpoint, with more than its 4 MiB buffer budget waiting, reads nothing for this long (0 never closes; docs/flow-control.md)",
  },
  {
    key: "drainGracePeriod",
    flag: "drain-grace-period",
    kind: "duration",
    default: 30_000,
    description:
      "After the first SIGTERM (which sends DRAIN), exit once idle or after this long; a second signal exits at once",
  },
  {
    key: "certReloadInterval",
    flag: "cert-reload-interval",
    kind: "duration",
    default: 10_000,
    description:
      "How often to re-read --ca-cert/--agent-cert/--agent-key (by content, so Kubernetes Secret volumes work; each connection attempt re-reads them too). New files that check out are used from the next connection attempt, established tunnels keep running; a bad file is refused and logged, the old certificates stay (0: only at connection attempts)",
  },
  ENABLE_PROFILING_SPEC,
  {
    key: "alpnProto",
    flag: "alpn-proto",
    kind: "list",
    default: [],
    goCompatible: true,
    description:
      "Additional ALPN protocols offered when connecting to the server (before h2), to tell proxy and apiserver connections apart on a shared address",
  },
  {
    key: "probeInterval",
    flag: "probe-interval",
    kind: "duration",
    default: 1_000,
    description: "Go: how often the agent checks that its server connections are ready",
    goNote: "accepted, no effect: ours computes /readyz from the live connections on each request",
  },
  {
    key: "syncForever",
    flag: "sync-forever",
    kind: "boolean",
    default: false,
    description: "Go: keep syncing after connecting to every server, to follow server count changes",
    goNote:
      "accepted; ours always keeps syncing every --sync-interval (as Go with true), so a changed servercount is followed either way",
  },
  {
    key: "countServerLeases",
    flag: "count-server-leases",
    kind: "boolean",
    default: false,
    description: "Go: count proxy-server Leases to learn the number of servers",
    unsupported: "the agent learns the server count from the servers' servercount header only",
  },
  {
    key: "serverCountSource",
    flag: "server-count-source",
    kind: "string",
    default: "default",
    choices: ["default", "max"],
    description: "Go: how Lease and server counts combine (default or max)",
    goNote: "accepted, no effect: without Lease counting the servers' count is the only source",
  },
  {
    key: "kubeconfig",
    flag: "kubeconfig",
    kind: "path",
    default: "",
    description: "Go: kubeconfig for Lease counting",
    goNote: "accepted, no effect: only used by --count-server-leases, which is refused",
  },
  {
    key: "leaseNamespace",
    flag: "lease-namespace",
    kind: "string",
    default: "kube-system",
    description: "Go: namespace of the proxy-server Leases",
    goNote: "accepted, no effect: only used by --count-server-leases, which is refused",
  },
  {
    key: "leaseLabel",
    flag: "lease-label",
    kind: "string",
    default: "k8s-app=konnectivity-server",
    description: "Go: labels of the proxy-server Leases",
    goNote: "accepted, no effect: only used by --count-server-leases, which is refused",
  },
  {
    key: "kubeApiContentType",
    flag: "kube-api-content-type",
    kind: "string",
    default: "application/vnd.kubernetes.protobuf",
    description: "Go: content type of requests sent to the apiserver",
    goNote: "accepted, no effect: the agent sends no requests to the apiserver",
  },
  ENABLE_CONTENTION_PROFILING_SPEC,
  {
    key: "xfrChannelSize",
    flag: "xfr-channel-size",
    kind: "int",
    default: 150,
    description: "Go: size of the agent's packet channel",
    goNote:
      "accepted (must be positive), no effect: ours has no packet channel; each connection has its own flow-control budget (docs/flow-control.md)",
  },
  {
    key: "warnOnChannelLimit",
    flag: "warn-on-channel-limit",
    kind: "boolean",
    default: false,
    description: "Go: warn when pushing to a full channel",
    goNote: "accepted, no effect: ours has no packet channel",
  },
  ...LOG_OPTION_SPECS,
];
