/** The proxy-server's options. Flag names shared with the Go proxy-server mean the same thing. */
import { ENABLE_PROFILING_SPEC, type OptionSpec } from "./options.js";

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

export interface ServerOptions {
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
  /** Optional so callers written before it keep compiling; undefined means `certificate`. */
  agentIdentity?: AgentIdentityMode;
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
  connectionStallTimeout: number;
  gracefulShutdownTimeout: number;
  /** Optional; undefined means off. */
  enableProfiling?: boolean;
  logLevel: string;
}

export const serverOptionSpecs: readonly OptionSpec[] = [
  {
    key: "mode",
    flag: "mode",
    kind: "string",
    default: "both",
    choices: ["grpc", "http-connect", "both"],
    goCompatible: true,
    description:
      "Front doors to serve on --server-port: grpc (ProxyService), http-connect, or both (gRPC on --server-port and HTTP CONNECT on --http-connect-port)",
  },
  {
    key: "serverPort",
    flag: "server-port",
    kind: "port",
    default: 8090,
    goCompatible: true,
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
    default: "certificate",
    choices: AGENT_IDENTITY_MODES,
    description:
      "Where agent identity comes from. certificate: an agent may only claim host identifiers its client certificate grants (URI SANs cluster-proxy://cluster/<name>, see Security) and no ipv4/ipv6/cidr/default-route identifiers; refused agents get PERMISSION_DENIED. shared: Go behaviour for deployments where all agents share one certificate (identifiers are self-asserted)",
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
    default: ["destHost", "default"],
    goCompatible: true,
    description: "Comma list of routing strategies tried in order: destHost, default, defaultRoute",
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
    default: 30_000,
    goCompatible: true,
    description:
      "Interval of keepalive pings to agents (0 disables); a ping unanswered for --keepalive-timeout closes the agent's tunnel",
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
    default: 60_000,
    goCompatible: true,
    description: "Interval of keepalive pings to clients (0 disables)",
  },
  {
    key: "backendDialTimeout",
    flag: "backend-dial-timeout",
    kind: "duration",
    default: 30_000,
    goCompatible: true,
    description: "Fail a dial the agent has not answered in this time (0 waits forever)",
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
    default: 5_000,
    goCompatible: true,
    description: "On SIGTERM, stop accepting and wait this long for open connections before closing",
  },
  ENABLE_PROFILING_SPEC,
  {
    key: "logLevel",
    flag: "log-level",
    kind: "string",
    default: "info",
    choices: ["debug", "info", "warn", "error", "silent"],
    description: "Log level",
  },
];
