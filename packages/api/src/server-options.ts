/** The proxy-server's options. Flag names shared with the Go proxy-server mean the same thing. */
import { LOG_OPTION_SPECS, type LogOptions } from "./log-options.js";
import { ENABLE_CONTENTION_PROFILING_SPEC, ENABLE_PROFILING_SPEC, type OptionSpec } from "./options.js";

export const PROXY_STRATEGIES = ["destHost", "default", "defaultRoute"] as const;
export type ProxyStrategy = (typeof PROXY_STRATEGIES)[number];

/**
 * Where an agent's identity comes from: `certificate` (the cluster names its client certificate
 * grants bound what its `agentidentifiers` may claim) or `shared` (Go behaviour: identifiers are
 * self-asserted, any agent certificate the CA signed may claim anything).
 */
export const AGENT_IDENTITY_MODES = ["certificate", "shared"] as const;
export type AgentIdentityMode = (typeof AGENT_IDENTITY_MODES)[number];

/** The namespace the cluster-proxy addon agent runs in by default (it announces `host=<cluster>.<ns>`). */
export const DEFAULT_AGENT_IDENTITY_NAMESPACE = "open-cluster-management-agent-addon";

/** Default `--max-concurrent-handshakes`. */
export const DEFAULT_MAX_CONCURRENT_HANDSHAKES = 16;
/** Default `--max-pending-handshakes`. */
export const DEFAULT_MAX_PENDING_HANDSHAKES = 20_000;

export interface ServerOptions extends LogOptions {
  mode: "grpc" | "http-connect" | "both";
  serverPort: number;
  serverBindAddress: string;
  httpConnectPort: number;
  httpConnectBindAddress: string;
  httpConnectPlain: boolean;
  udsName: string;
  httpConnectUdsName: string;
  deleteExistingUdsFile: boolean;
  agentPort: number;
  agentBindAddress: string;
  healthPort: number;
  healthBindAddress: string;
  adminPort: number;
  adminBindAddress: string;
  serverCert: string;
  serverKey: string;
  serverCaCert: string;
  clusterCert: string;
  clusterKey: string;
  clusterCaCert: string;
  /** Optional; undefined means 10 s. 0 disables certificate reloading. */
  certReloadInterval?: number;
  /**
   * Optional so callers written before it keep compiling; undefined or "" means `certificate`
   * with --cluster-ca-cert and `shared` with ServiceAccount token authentication.
   */
  agentIdentity?: AgentIdentityMode | "";
  /** Optional; undefined means the default (`open-cluster-management-agent-addon`). */
  agentIdentityNamespaces?: string[];
  proxyStrategies: string[];
  serverCount: number;
  serverId: string;
  keepaliveTime: number;
  /** Optional; undefined means 10 s. */
  keepaliveTimeout?: number;
  frontendKeepaliveTime: number;
  backendDialTimeout: number;
  /** Optional; undefined means {@link DEFAULT_MAX_CONCURRENT_HANDSHAKES}. */
  maxConcurrentHandshakes?: number;
  /** Optional; undefined means {@link DEFAULT_MAX_PENDING_HANDSHAKES}. */
  maxPendingHandshakes?: number;
  connectionStallTimeout: number;
  gracefulShutdownTimeout: number;
  /** Optional; undefined means off. */
  enableProfiling?: boolean;
  /** ServiceAccount token authentication of agents (all three or none; see validateServerOptions). */
  agentNamespace?: string;
  agentServiceAccount?: string;
  authenticationAudience?: string;
  /** Kubeconfig of the TokenReview client ("" = in-cluster config). */
  kubeconfig?: string;
  kubeconfigQps?: number;
  kubeconfigBurst?: number;
  /** Go crypto/tls names; [] = node's defaults. */
  cipherSuites?: string[];
  /** `VersionTLS12` ...; "" = TLS 1.2. */
  tlsMinVersion?: string;
}

export const serverOptionSpecs: readonly OptionSpec[] = [
  {
    key: "mode",
    flag: "mode",
    kind: "string",
    default: "grpc",
    choices: ["grpc", "http-connect", "both"],
    goCompatible: true,
    goDifference: "ours also has `both` (gRPC and HTTP CONNECT at once)",
    description:
      "Front door to serve on --server-port / --uds-name: grpc (ProxyService) or http-connect, as in Go; or both (ours: gRPC there and HTTP CONNECT on --http-connect-port / --http-connect-uds-name)",
  },
  {
    key: "serverPort",
    flag: "server-port",
    kind: "port",
    default: 8090,
    goCompatible: true,
    goDifference: "ours may serve TCP next to --uds-name (Go insists on 0 with a socket)",
    description:
      "Port of the client front door (mTLS). 0 with --uds-name serves only the Unix socket; 0 without it picks a free port",
  },
  {
    key: "serverBindAddress",
    flag: "server-bind-address",
    kind: "string",
    default: "",
    goCompatible: true,
    description: "Address the client front door binds to (empty: all)",
  },
  {
    key: "httpConnectPort",
    flag: "http-connect-port",
    kind: "port",
    default: 8093,
    description:
      "Port of the HTTP CONNECT front door in --mode=both (mTLS; plain HTTP only with --http-connect-plain on a loopback address). 0 picks a free port, or serves only --http-connect-uds-name when that is set",
  },
  {
    key: "httpConnectBindAddress",
    flag: "http-connect-bind-address",
    kind: "string",
    default: "",
    description: "Address the HTTP CONNECT port binds to in --mode=both (empty: same as --server-bind-address)",
  },
  {
    key: "httpConnectPlain",
    flag: "http-connect-plain",
    kind: "boolean",
    default: false,
    description:
      "Serve the TCP HTTP CONNECT front door without TLS. Refused unless its bind address is a loopback address (127.0.0.0/8, ::1, localhost)",
  },
  {
    key: "udsName",
    flag: "uds-name",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Unix socket for the client front door (plain, no TLS; protect it with file permissions)",
  },
  {
    key: "httpConnectUdsName",
    flag: "http-connect-uds-name",
    kind: "path",
    default: "",
    description: "Unix socket for the HTTP CONNECT front door in --mode=both (plain)",
  },
  {
    key: "deleteExistingUdsFile",
    flag: "delete-existing-uds-file",
    kind: "boolean",
    default: true,
    goCompatible: true,
    description: "Remove a stale socket file before listening",
  },
  {
    key: "agentPort",
    flag: "agent-port",
    kind: "port",
    default: 8091,
    goCompatible: true,
    description: "Port agents connect to (mTLS; 0 picks a free port)",
  },
  {
    key: "agentBindAddress",
    flag: "agent-bind-address",
    kind: "string",
    default: "",
    goCompatible: true,
    description: "Address the agent port binds to (empty: all)",
  },
  {
    key: "healthPort",
    flag: "health-port",
    kind: "port",
    default: 8092,
    goCompatible: true,
    description: "Port serving /healthz, /readyz and /metrics (0 picks a free port)",
  },
  {
    key: "healthBindAddress",
    flag: "health-bind-address",
    kind: "string",
    default: "",
    goCompatible: true,
    description: "Address the health port binds to (empty: all)",
  },
  {
    key: "adminPort",
    flag: "admin-port",
    kind: "port",
    default: 8095,
    goCompatible: true,
    description: "Port serving /metrics for operators (0 picks a free port)",
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
    key: "serverCert",
    flag: "server-cert",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Certificate of the client front door (PEM)",
  },
  {
    key: "serverKey",
    flag: "server-key",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Private key of --server-cert (PEM)",
  },
  {
    key: "serverCaCert",
    flag: "server-ca-cert",
    kind: "path",
    default: "",
    goCompatible: true,
    goDifference: "required for the TCP front doors, as in Go",
    description: "CA that client certificates must chain to (required for the TCP front doors)",
  },
  {
    key: "clusterCert",
    flag: "cluster-cert",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Certificate of the agent port (PEM, required)",
  },
  {
    key: "clusterKey",
    flag: "cluster-key",
    kind: "path",
    default: "",
    goCompatible: true,
    description: "Private key of --cluster-cert (PEM, required)",
  },
  {
    key: "clusterCaCert",
    flag: "cluster-ca-cert",
    kind: "path",
    default: "",
    goCompatible: true,
    goDifference:
      "ours refuses to start with neither this nor ServiceAccount token authentication (Go then accepts any agent)",
    description: "CA that agent certificates must chain to (required: agents without a valid certificate are refused)",
  },
  {
    key: "certReloadInterval",
    flag: "cert-reload-interval",
    kind: "duration",
    default: 10_000,
    description:
      "How often to re-read --server-cert/--server-key/--server-ca-cert and --cluster-cert/--cluster-key/--cluster-ca-cert (by content, so Kubernetes Secret volumes work); changed files that check out are used for new handshakes without a restart, established tunnels keep running; a bad file is refused and logged, the old certificates stay (0 disables)",
  },
  {
    key: "agentIdentity",
    flag: "agent-identity",
    kind: "string",
    default: "",
    choices: ["", ...AGENT_IDENTITY_MODES],
    description:
      "Where agent identity comes from. certificate: an agent may only claim host identifiers its client certificate grants (URI SANs cluster-proxy://cluster/<name>, see Security) and no ipv4/ipv6/cidr/default-route identifiers; refused agents get PERMISSION_DENIED. shared: Go behaviour for deployments where all agents share one certificate or one ServiceAccount (identifiers are self-asserted). Empty: certificate with --cluster-ca-cert, shared with ServiceAccount token authentication",
  },
  {
    key: "agentIdentityNamespaces",
    flag: "agent-identity-namespaces",
    kind: "list",
    default: [DEFAULT_AGENT_IDENTITY_NAMESPACE],
    description:
      "With --agent-identity=certificate, a certificate granting cluster <name> also grants host=<name>.<namespace> for these namespaces (the Go cluster-proxy addon's identifiers; empty: none)",
  },
  {
    key: "proxyStrategies",
    flag: "proxy-strategies",
    kind: "list",
    default: ["default"],
    goCompatible: true,
    goDifference: "a strategy listed twice or an unknown one is refused",
    description:
      "Comma list of routing strategies tried in order: destHost, default, defaultRoute. The Go default sends a dial to any agent; to route <cluster>:<port> to that cluster's agent use destHost (or destHost,default)",
  },
  {
    key: "serverCount",
    flag: "server-count",
    kind: "int",
    default: 1,
    goCompatible: true,
    description: "Number of server replicas behind the agents' address (sent to agents as servercount)",
  },
  {
    key: "serverId",
    flag: "server-id",
    kind: "string",
    default: "",
    env: "PROXY_SERVER_ID",
    goCompatible: true,
    description: "Unique ID of this server (default: a random UUID)",
  },
  {
    key: "keepaliveTime",
    flag: "keepalive-time",
    kind: "duration",
    default: 3_600_000,
    goCompatible: true,
    description:
      "Interval of keepalive pings to agents (0 disables); a ping unanswered for --keepalive-timeout closes the agent's tunnel. The Go default of 1h notices a silently vanished agent late: 30s is a good value where the network may drop peers without a FIN",
  },
  {
    key: "keepaliveTimeout",
    flag: "keepalive-timeout",
    kind: "duration",
    default: 10_000,
    description:
      "Close an agent's or a gRPC client's HTTP/2 session, and every connection in it, when a keepalive ping (--keepalive-time, --frontend-keepalive-time) is unanswered this long: how fast a peer that vanished behind a silent network is noticed",
  },
  {
    key: "frontendKeepaliveTime",
    flag: "frontend-keepalive-time",
    kind: "duration",
    default: 3_600_000,
    goCompatible: true,
    description: "Interval of keepalive pings to gRPC clients (0 disables)",
  },
  {
    key: "maxConcurrentHandshakes",
    flag: "max-concurrent-handshakes",
    kind: "int",
    default: DEFAULT_MAX_CONCURRENT_HANDSHAKES,
    description:
      "TLS handshakes each TLS port works on at once; further connections are accepted and wait their turn, first come first served, instead of all slowing down together (a reconnect storm of agents then succeeds a little later instead of timing out and retrying)",
  },
  {
    key: "maxPendingHandshakes",
    flag: "max-pending-handshakes",
    kind: "int",
    default: DEFAULT_MAX_PENDING_HANDSHAKES,
    description:
      "Accepted connections that may wait for their TLS handshake per port; beyond, the server sheds new ones with a TLS user_canceled alert (our agents read it as 'server overloaded' and back off by --sync-interval-cap)",
  },
  {
    key: "backendDialTimeout",
    flag: "backend-dial-timeout",
    kind: "duration",
    default: 0,
    goCompatible: true,
    description:
      "Fail a dial the agent has not answered in this time (0, the Go default, waits until the agent answers or goes away; our agent always answers within its --dial-timeout)",
  },
  {
    key: "connectionStallTimeout",
    flag: "connection-stall-timeout",
    kind: "duration",
    default: 60_000,
    description:
      "Close a tunnelled connection whose client, with more than its 4 MiB buffer budget waiting, reads nothing for this long (0 never closes; docs/flow-control.md)",
  },
  {
    key: "gracefulShutdownTimeout",
    flag: "graceful-shutdown-timeout",
    kind: "duration",
    default: 0,
    goCompatible: true,
    description:
      "On SIGTERM, stop accepting and wait this long for open connections before closing (0, the Go default: close at once)",
  },
  ENABLE_PROFILING_SPEC,
  ENABLE_CONTENTION_PROFILING_SPEC,
  {
    key: "agentNamespace",
    flag: "agent-namespace",
    kind: "string",
    default: "",
    goCompatible: true,
    description:
      "ServiceAccount token authentication of agents: the namespace of the agents' ServiceAccount (with --agent-service-account and --authentication-audience; replaces --cluster-ca-cert)",
  },
  {
    key: "agentServiceAccount",
    flag: "agent-service-account",
    kind: "string",
    default: "",
    goCompatible: true,
    description:
      "ServiceAccount token authentication: the agents' ServiceAccount; an agent's 'authorization: Bearer <token>' must pass a TokenReview as system:serviceaccount:<namespace>:<this>",
  },
  {
    key: "authenticationAudience",
    flag: "authentication-audience",
    kind: "string",
    default: "",
    goCompatible: true,
    description: "ServiceAccount token authentication: the audience agent tokens must be issued for",
  },
  {
    key: "kubeconfig",
    flag: "kubeconfig",
    kind: "path",
    default: "",
    goCompatible: true,
    description:
      "Kubeconfig of the apiserver that reviews agent tokens (TokenReview); empty: the in-cluster ServiceAccount config",
  },
  {
    key: "kubeconfigQps",
    flag: "kubeconfig-qps",
    kind: "float",
    default: 0,
    goCompatible: true,
    description: "Maximum TokenReview requests per second to the apiserver (0: 5, client-go's default)",
  },
  {
    key: "kubeconfigBurst",
    flag: "kubeconfig-burst",
    kind: "int",
    default: 0,
    goCompatible: true,
    description: "Maximum burst of TokenReview requests (0: 10, client-go's default)",
  },
  {
    key: "kubeApiContentType",
    flag: "kube-api-content-type",
    kind: "string",
    default: "application/vnd.kubernetes.protobuf",
    description: "Go: content type of requests sent to the apiserver",
    goNote: "accepted, no effect: ours sends TokenReviews as JSON",
  },
  {
    key: "cipherSuites",
    flag: "cipher-suites",
    kind: "list",
    default: [],
    goCompatible: true,
    goDifference: "an unknown or insecure name is refused (Go silently turns it into cipher 0)",
    description:
      "Comma list of the TLS 1.2 cipher suites the TLS ports allow, by Go crypto/tls name (e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); TLS 1.3 names are accepted and, as in Go, have no effect. Empty: the default list. Unknown names are refused (Go silently turns them into cipher 0)",
  },
  {
    key: "tlsMinVersion",
    flag: "tls-min-version",
    kind: "string",
    default: "",
    choices: ["", "VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"],
    goCompatible: true,
    description:
      "Minimum TLS version of the TLS ports: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13 (empty: TLS 1.2)",
  },
  {
    key: "xfrChannelSize",
    flag: "xfr-channel-size",
    kind: "int",
    default: 10,
    description: "Go: size of the server's packet channels",
    goNote:
      "accepted (must be positive), no effect: ours has no packet channels; each connection has its own flow-control budget (docs/flow-control.md)",
  },
  {
    key: "enableLeaseController",
    flag: "enable-lease-controller",
    kind: "boolean",
    default: false,
    description: "Go: publish and garbage-collect proxy-server Leases (for agents with --count-server-leases)",
    unsupported: "servers do not publish Leases; give agents the count with --server-count",
  },
  {
    key: "leaseNamespace",
    flag: "lease-namespace",
    kind: "string",
    default: "kube-system",
    description: "Go: namespace of the lease controller's Leases",
    goNote: "accepted, no effect: only used by --enable-lease-controller, which is refused",
  },
  {
    key: "leaseLabel",
    flag: "lease-label",
    kind: "string",
    default: "k8s-app=konnectivity-server",
    description: "Go: labels of the lease controller's Leases",
    goNote: "accepted, no effect: only used by --enable-lease-controller, which is refused",
  },
  {
    key: "warnOnChannelLimit",
    flag: "warn-on-channel-limit",
    kind: "boolean",
    default: true,
    description: "Go (deprecated, hidden): warn on full channels",
    goNote: "accepted, no effect: ours has no packet channels",
  },
  ...LOG_OPTION_SPECS,
];
