/**
 * The proxy-server's options: one schema (types, defaults, rules, flags). Flag names shared with
 * the Go proxy-server mean the same thing.
 */
import { isIP } from "node:net";
import { isDns1123Label } from "./cluster-name.js";
import { LOG_OPTION_FIELDS } from "./log-options.js";
import { ConfigError } from "./options.js";
import { AGENT_DOOR_PORT, CONNECT_DOOR_PORT, GRPC_DOOR_PORT, HEALTH_DOOR_PORT } from "./hub-names.js";
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
import { tlsProfileOptions } from "./tls-profile.js";

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

function namespaceProblem(namespaces: readonly string[]): string[] {
  return namespaces
    .filter((ns) => !isDns1123Label(ns))
    .map((ns) => `"${ns}" is not a Kubernetes namespace name (a DNS-1123 label)`);
}

function strategiesProblem(strategies: readonly string[]): string[] {
  if (strategies.length === 0) return ["at least one strategy is needed"];
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const s of strategies) {
    if (!(PROXY_STRATEGIES as readonly string[]).includes(s))
      problems.push(`"${s}" is not one of ${PROXY_STRATEGIES.join(", ")}`);
    if (seen.has(s)) problems.push(`"${s}" is listed twice`);
    seen.add(s);
  }
  return problems;
}

/** The proxy-server's option fields (in flag-reference order). */
const serverOptionFields = {
  mode: opt.choice(["grpc", "http-connect", "both"] as const, "grpc", {
    flag: "mode",
    goCompatible: true,
    goDifference: "ours also has `both` (gRPC and HTTP CONNECT at once)",
    description:
      "Front door to serve on --server-port / --uds-name: grpc (ProxyService) or http-connect, as in Go; or both (ours: gRPC there and HTTP CONNECT on --http-connect-port / --http-connect-uds-name)",
  }),
  serverPort: opt.port(GRPC_DOOR_PORT, {
    flag: "server-port",
    goCompatible: true,
    goDifference: "ours may serve TCP next to --uds-name (Go insists on 0 with a socket)",
    description:
      "Port of the client front door (mTLS). 0 with --uds-name serves only the Unix socket; 0 without it picks a free port",
  }),
  serverBindAddress: opt.string("", {
    flag: "server-bind-address",
    goCompatible: true,
    description: "Address the client front door binds to (empty: all)",
  }),
  httpConnectPort: opt.port(CONNECT_DOOR_PORT, {
    flag: "http-connect-port",
    description:
      "Port of the HTTP CONNECT front door in --mode=both (mTLS; plain HTTP only with --http-connect-plain on a loopback address). 0 picks a free port, or serves only --http-connect-uds-name when that is set",
  }),
  httpConnectBindAddress: opt.string("", {
    flag: "http-connect-bind-address",
    description: "Address the HTTP CONNECT port binds to in --mode=both (empty: same as --server-bind-address)",
  }),
  httpConnectPlain: opt.boolean(false, {
    flag: "http-connect-plain",
    description:
      "Serve the TCP HTTP CONNECT front door without TLS. Refused unless its bind address is a loopback address (127.0.0.0/8, ::1, localhost)",
  }),
  udsName: opt.path("", {
    flag: "uds-name",
    goCompatible: true,
    description: "Unix socket for the client front door (plain, no TLS; protect it with file permissions)",
  }),
  httpConnectUdsName: opt.path("", {
    flag: "http-connect-uds-name",
    description: "Unix socket for the HTTP CONNECT front door in --mode=both (plain)",
  }),
  deleteExistingUdsFile: opt.boolean(true, {
    flag: "delete-existing-uds-file",
    goCompatible: true,
    description: "Remove a stale socket file before listening",
  }),
  agentPort: opt.port(AGENT_DOOR_PORT, {
    flag: "agent-port",
    goCompatible: true,
    description: "Port agents connect to (mTLS; 0 picks a free port)",
  }),
  agentBindAddress: opt.string("", {
    flag: "agent-bind-address",
    goCompatible: true,
    description: "Address the agent port binds to (empty: all)",
  }),
  agentUpgradePort: opt.port(0, {
    flag: "agent-upgrade-port",
    description:
      "Port of the agent upgrade door (plain HTTP; 0: off). It answers only `GET` with `Connection: Upgrade` and `Upgrade: cluster-proxy-agent-tunnel` with 101 and hands the connection to the agent port, where the agent's mTLS handshake runs as on --agent-port: agents whose only way to the hub is its kube-apiserver reach it through `pods/<pod>:<port>/proxy` (entrypoint type PortForward). Anything else is refused",
  }),
  agentUpgradeHeaderTimeout: opt.duration(
    10_000,
    {
      flag: "agent-upgrade-header-timeout",
      description:
        "A request on --agent-upgrade-port must have sent its whole head this long after the connection was accepted, else the connection is closed",
    },
    rules.atLeastMs(1),
  ),
  healthPort: opt.port(HEALTH_DOOR_PORT, {
    flag: "health-port",
    goCompatible: true,
    description: "Port serving /healthz, /readyz and /metrics (0 picks a free port)",
  }),
  healthBindAddress: opt.string("", {
    flag: "health-bind-address",
    goCompatible: true,
    description: "Address the health port binds to (empty: all)",
  }),
  adminPort: opt.port(8095, {
    flag: "admin-port",
    goCompatible: true,
    description: "Port serving /metrics for operators (0 picks a free port)",
  }),
  adminBindAddress: opt.string("127.0.0.1", {
    flag: "admin-bind-address",
    goCompatible: true,
    description: "Address the admin port binds to",
  }),
  serverCert: opt.path("", {
    flag: "server-cert",
    goCompatible: true,
    description: "Certificate of the client front door (PEM)",
  }),
  serverKey: opt.path("", {
    flag: "server-key",
    goCompatible: true,
    description: "Private key of --server-cert (PEM)",
  }),
  serverCaCert: opt.path("", {
    flag: "server-ca-cert",
    goCompatible: true,
    goDifference: "required for the TCP front doors, as in Go",
    description: "CA that client certificates must chain to (required for the TCP front doors)",
  }),
  clusterCert: opt.path(
    "",
    {
      flag: "cluster-cert",
      goCompatible: true,
      description: "Certificate of the agent port (PEM, required)",
    },
    rules.nonEmpty("required (certificate of the agent port)"),
  ),
  clusterKey: opt.path(
    "",
    {
      flag: "cluster-key",
      goCompatible: true,
      description: "Private key of --cluster-cert (PEM, required)",
    },
    rules.nonEmpty("required (private key of --cluster-cert)"),
  ),
  clusterCaCert: opt.path("", {
    flag: "cluster-ca-cert",
    goCompatible: true,
    goDifference:
      "ours refuses to start with neither this nor ServiceAccount token authentication (Go then accepts any agent)",
    description: "CA that agent certificates must chain to (required: agents without a valid certificate are refused)",
  }),
  certReloadInterval: opt.duration(
    10_000,
    {
      flag: "cert-reload-interval",
      description:
        "How often to re-read --server-cert/--server-key/--server-ca-cert and --cluster-cert/--cluster-key/--cluster-ca-cert (by content, so Kubernetes Secret volumes work); changed files that check out are used for new handshakes without a restart, established tunnels keep running; a bad file is refused and logged, the old certificates stay (0 disables)",
    },
    rules.notNegative,
  ),
  agentIdentity: opt.choice(["", ...AGENT_IDENTITY_MODES] as const, "", {
    flag: "agent-identity",
    description:
      "Where agent identity comes from. certificate: an agent may only claim host identifiers its client certificate grants (URI SANs cluster-proxy://cluster/<name>, see Security) and no ipv4/ipv6/cidr/default-route identifiers; refused agents get PERMISSION_DENIED. shared: Go behaviour for deployments where all agents share one certificate or one ServiceAccount (identifiers are self-asserted). Empty: certificate with --cluster-ca-cert, shared with ServiceAccount token authentication",
  }),
  agentIdentityNamespaces: opt.list(
    [DEFAULT_AGENT_IDENTITY_NAMESPACE],
    {
      flag: "agent-identity-namespaces",
      description:
        "With --agent-identity=certificate, a certificate granting cluster <name> also grants host=<name>.<namespace> for these namespaces (the Go cluster-proxy addon's identifiers; empty: none)",
    },
    (list) => namespaceProblem(list),
  ),
  proxyStrategies: opt.list(
    ["default"],
    {
      flag: "proxy-strategies",
      goCompatible: true,
      goDifference: "a strategy listed twice or an unknown one is refused",
      description:
        "Comma list of routing strategies tried in order: destHost, default, defaultRoute. The Go default sends a dial to any agent; to route <cluster>:<port> to that cluster's agent use destHost (or destHost,default)",
    },
    strategiesProblem,
  ),
  serverCount: opt.int(
    1,
    {
      flag: "server-count",
      goCompatible: true,
      description: "Number of server replicas behind the agents' address (sent to agents as servercount)",
    },
    (n) => (!Number.isInteger(n) || n < 1 ? `must be a positive integer, got ${n}` : undefined),
  ),
  serverId: opt.string("", {
    flag: "server-id",
    env: "PROXY_SERVER_ID",
    goCompatible: true,
    description: "Unique ID of this server (default: a random UUID)",
  }),
  keepaliveTime: opt.duration(
    3_600_000,
    {
      flag: "keepalive-time",
      goCompatible: true,
      description:
        "Interval of keepalive pings to agents (0 disables); a ping unanswered for --keepalive-timeout closes the agent's tunnel. The Go default of 1h notices a silently vanished agent late: 30s is a good value where the network may drop peers without a FIN",
    },
    rules.notNegative,
  ),
  keepaliveTimeout: opt.duration(
    10_000,
    {
      flag: "keepalive-timeout",
      description:
        "Close an agent's or a gRPC client's HTTP/2 session, and every connection in it, when a keepalive ping (--keepalive-time, --frontend-keepalive-time), or the ping a session gets after 5 s of silence, is unanswered this long: how fast a peer that vanished behind a silent network is noticed, and a session the server ended with GOAWAY (a protocol error, a flood) is freed",
    },
    rules.notNegative,
  ),
  frontendKeepaliveTime: opt.duration(
    3_600_000,
    {
      flag: "frontend-keepalive-time",
      goCompatible: true,
      description: "Interval of keepalive pings to gRPC clients (0 disables)",
    },
    rules.notNegative,
  ),
  maxConcurrentHandshakes: opt.int(
    16,
    {
      flag: "max-concurrent-handshakes",
      description:
        "TLS handshakes each TLS port works on at once; further connections are accepted and wait their turn, first come first served, instead of all slowing down together (a reconnect storm of agents then succeeds a little later instead of timing out and retrying)",
    },
    (n) => (!Number.isInteger(n) || n < 1 ? `must be a positive integer, got ${n}` : undefined),
  ),
  maxPendingHandshakes: opt.int(
    20_000,
    {
      flag: "max-pending-handshakes",
      description:
        "Accepted connections that may wait for their TLS handshake per port; beyond, the server sheds new ones with a TLS user_canceled alert (our agents read it as 'server overloaded' and back off by --sync-interval-cap)",
    },
    (n) => (!Number.isInteger(n) || n < 0 ? `must not be negative, got ${n}` : undefined),
  ),
  maxHandshakesPerSource: opt.int(
    2_000,
    {
      flag: "max-handshakes-per-source",
      description:
        "Connections one source address (an IPv6 /64) may hold on a TLS port before their TLS handshake is done: waiting for their ClientHello, for their turn or in the handshake. At the limit the oldest of its connections that has sent nothing yet is closed for the new one, or else the new one is closed. The default lets a NAT address with 2,000 agents behind it reconnect at once (more retry after their backoff) and keeps one address from holding more",
    },
    (n) => (!Number.isInteger(n) || n < 1 ? `must be a positive integer, got ${n}` : undefined),
  ),
  maxConnectionsAwaitingHello: opt.int(
    20_000,
    {
      flag: "max-connections-awaiting-hello",
      description:
        "Accepted connections per TLS port that have not sent their TLS ClientHello yet; at the limit the oldest is closed to make room (a silent flood cannot lock clients out: a real client sends its ClientHello within milliseconds)",
    },
    (n) => (!Number.isInteger(n) || n < 1 ? `must be a positive integer, got ${n}` : undefined),
  ),
  clientHelloTimeout: opt.duration(
    10_000,
    {
      flag: "client-hello-timeout",
      description:
        "Close a connection to a TLS port that has not sent its complete TLS ClientHello this long after it was accepted. Only a connection with a ClientHello waits for a handshake slot (--max-concurrent-handshakes)",
    },
    rules.atLeastMs(1),
  ),
  handshakeTimeout: opt.duration(
    30_000,
    {
      flag: "handshake-timeout",
      description:
        "Close a connection whose TLS handshake has not finished this long after its turn came (the wait for a slot is not counted: a queued client succeeds later instead of failing)",
    },
    rules.atLeastMs(1),
  ),
  httpConnectHeaderTimeout: opt.duration(
    60_000,
    {
      flag: "http-connect-header-timeout",
      description:
        "An HTTP CONNECT request head must be complete this long after the connection was accepted (or its TLS handshake done); a head trickled a byte at a time does not extend it (Go's ReadHeaderTimeout is 60s)",
    },
    rules.atLeastMs(1),
  ),
  tcpKeepalive: opt.duration(
    30_000,
    {
      flag: "tcp-keepalive",
      description:
        "TCP keepalive on every accepted TCP connection (agent port, front doors): idle time before the first probe; on Linux probes follow every second and a peer silent for 10 of them is dropped, so a peer that vanished without a FIN (its tunnels and CONNECT sockets with it) is noticed after about this plus 10s (0 disables)",
    },
    rules.notNegative,
  ),
  backendDialTimeout: opt.duration(
    0,
    {
      flag: "backend-dial-timeout",
      goCompatible: true,
      description:
        "Fail a dial the agent has not answered in this time (0, the Go default, waits until the agent answers or goes away; our agent always answers within its --dial-timeout)",
    },
    rules.notNegative,
  ),
  connectionStallTimeout: opt.duration(
    60_000,
    {
      flag: "connection-stall-timeout",
      description:
        "Close a tunnelled connection whose client, with more than its 4 MiB buffer budget waiting, reads nothing for this long (0 never closes; docs/design/flow-control.md)",
    },
    rules.notNegative,
  ),
  gracefulShutdownTimeout: opt.duration(
    0,
    {
      flag: "graceful-shutdown-timeout",
      goCompatible: true,
      description:
        "On SIGTERM, drain: /readyz answers not ready, every HTTP/2 session (clients' and agents') gets GOAWAY, new dials and CONNECT requests are refused as draining, and the tunnels open or dialling get this long to finish before the server closes (0, the Go default: close at once)",
    },
    rules.notNegative,
  ),
  shutdownDelay: opt.duration(
    0,
    {
      flag: "shutdown-delay",
      description:
        "On SIGTERM, before the drain of --graceful-shutdown-timeout: /readyz answers not ready and the server keeps serving everything for this long, new connections and dials included, while the Service stops sending clients here (clients that do not retry lose nothing; the addon manager sets 5s). 0: drain at once",
    },
    rules.notNegative,
  ),
  readyAfterAgentsTimeout: opt.duration(
    30_000,
    {
      flag: "ready-after-agents-timeout",
      description:
        "/readyz answers ready once an agent is connected, or once this long has passed since start without one (a hub without clusters, agents that cannot reach a not-ready server); 0 waits for an agent forever, as the Go server does. Never ready while draining",
    },
    rules.notNegative,
  ),
  warmUpDialWait: opt.duration(
    0,
    {
      flag: "warm-up-dial-wait",
      description:
        "During a new server's warm-up, until this long after it got ready (an agent connected, or --ready-after-agents-timeout passed), a dial for an address no agent serves waits for such an agent to connect (at most this long, never past --backend-dial-timeout; at most 1024 dials at once) instead of failing at once with No agent available: a ready replica takes clients before every cluster's agent has found it. 0, as Go: fail at once (the addon manager sets 20s)",
    },
    rules.notNegative,
  ),
  enableProfiling: ENABLE_PROFILING_FIELD,
  enableContentionProfiling: ENABLE_CONTENTION_PROFILING_FIELD,
  agentNamespace: opt.string("", {
    flag: "agent-namespace",
    goCompatible: true,
    description:
      "ServiceAccount token authentication of agents: the namespace of the agents' ServiceAccount (with --agent-service-account and --authentication-audience; replaces --cluster-ca-cert)",
  }),
  agentServiceAccount: opt.string("", {
    flag: "agent-service-account",
    goCompatible: true,
    description:
      "ServiceAccount token authentication: the agents' ServiceAccount; an agent's 'authorization: Bearer <token>' must pass a TokenReview as system:serviceaccount:<namespace>:<this>",
  }),
  authenticationAudience: opt.string("", {
    flag: "authentication-audience",
    goCompatible: true,
    description: "ServiceAccount token authentication: the audience agent tokens must be issued for",
  }),
  kubeconfig: opt.path("", {
    flag: "kubeconfig",
    goCompatible: true,
    description:
      "Kubeconfig of the apiserver that reviews agent tokens (TokenReview); empty: the in-cluster ServiceAccount config",
  }),
  kubeconfigQps: opt.float(
    0,
    {
      flag: "kubeconfig-qps",
      goCompatible: true,
      description: "Maximum TokenReview requests per second to the apiserver (0: 5, client-go's default)",
    },
    rules.notNegative,
  ),
  kubeconfigBurst: opt.int(
    0,
    {
      flag: "kubeconfig-burst",
      goCompatible: true,
      description: "Maximum burst of TokenReview requests (0: 10, client-go's default)",
    },
    rules.notNegative,
  ),
  kubeApiContentType: opt.string("application/vnd.kubernetes.protobuf", {
    flag: "kube-api-content-type",
    description: "Go: content type of requests sent to the apiserver",
    goNote: "accepted, no effect: ours sends TokenReviews as JSON",
  }),
  cipherSuites: opt.list([], {
    flag: "cipher-suites",
    goCompatible: true,
    goDifference: "an unknown or insecure name is refused (Go silently turns it into cipher 0)",
    description:
      "Comma list of the TLS 1.2 cipher suites the TLS ports allow, by Go crypto/tls name (e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); TLS 1.3 names are accepted and, as in Go, have no effect. Empty: the default list. Unknown names are refused (Go silently turns them into cipher 0)",
  }),
  tlsMinVersion: opt.choice(["", "VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"] as const, "", {
    flag: "tls-min-version",
    goCompatible: true,
    description:
      "Minimum TLS version of the TLS ports: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13 (empty: TLS 1.2)",
  }),
  tlsSessionTicketLifetime: opt.duration(
    3_600_000,
    {
      flag: "tls-session-ticket-lifetime",
      description:
        "TLS 1.3 session resumption on the TLS ports (agent port, client front doors): a client that offers a ticket this server (or a replica with the same --tls-session-ticket-key-file) issued less than this long ago skips the certificate exchange; the same identity checks apply as after a full handshake, and a session whose client certificate has expired since is refused; a ticket resumes only while the port's CA file (--cluster-ca-cert, --server-ca-cert) holds exactly the CAs of its full handshake. At most 7 days (TLS 1.3); 0 turns resumption off (every connection is a full handshake; the agent port then sends no tickets at all, about 10 KiB less per connected agent)",
    },
    (ms) =>
      !Number.isFinite(ms) || ms < 0
        ? "must not be negative"
        : ms > 0 && ms < 1_000
          ? `must be at least 1s or 0 (got ${ms} ms)`
          : ms > 7 * 86_400_000
            ? `must be at most 7 days, the TLS 1.3 limit (got ${ms} ms)`
            : undefined,
  ),
  tlsSessionTicketKeyFile: opt.path("", {
    flag: "tls-session-ticket-key-file",
    description:
      "File of the TLS session ticket keys every replica shares (the addon manager's Secret): one base64 48-byte key per line, the current one first and the previous one second. Tickets of the current key resume; tickets of the previous key still resume until it leaves the file (one rotation period). Re-read every --cert-reload-interval. Empty: each server makes its own random key (a ticket resumes only on the replica that issued it, until it restarts)",
  }),
  xfrChannelSize: opt.int(
    10,
    {
      flag: "xfr-channel-size",
      description: "Go: size of the server's packet channels",
      goNote:
        "accepted (must be positive), no effect: ours has no packet channels; each connection has its own flow-control budget (docs/design/flow-control.md)",
    },
    (n) => (n <= 0 ? `must be positive, got ${n}` : undefined),
  ),
  enableLeaseController: opt.boolean(false, {
    flag: "enable-lease-controller",
    description: "Go: publish and garbage-collect proxy-server Leases (for agents with --count-server-leases)",
    unsupported: "servers do not publish Leases; give agents the count with --server-count",
  }),
  leaseNamespace: opt.string("kube-system", {
    flag: "lease-namespace",
    description: "Go: namespace of the lease controller's Leases",
    goNote: "accepted, no effect: only used by --enable-lease-controller, which is refused",
  }),
  leaseLabel: opt.string("k8s-app=konnectivity-server", {
    flag: "lease-label",
    description: "Go: labels of the lease controller's Leases",
    goNote: "accepted, no effect: only used by --enable-lease-controller, which is refused",
  }),
  warnOnChannelLimit: opt.boolean(true, {
    flag: "warn-on-channel-limit",
    description: "Go (deprecated, hidden): warn on full channels",
    goNote: "accepted, no effect: ours has no packet channels",
  }),
  ...LOG_OPTION_FIELDS,
};

/** The proxy-server's option schema. */
export const serverOptionsSchema = defineOptions(serverOptionFields, serverCrossRules);

/** The proxy-server's flags (help, README reference, Go compatibility table). */
export const serverOptionSpecs = serverOptionsSchema.specs;

/** The proxy-server's options, validated, every default applied. */
export type ServerOptions = OptionsOf<typeof serverOptionFields>;
/** What a caller may give the proxy-server (options with a default may be left out). */
export type ServerOptionsInput = OptionsInputOf<typeof serverOptionFields>;

/**
 * Validate server options and apply the defaults (files are checked when the server starts).
 * Every problem found is reported in one ConfigError naming each flag, so a user fixes all
 * missing flags in one go.
 */
export function parseServerOptions(input: ServerOptionsInput): ServerOptions {
  return parseOptions(serverOptionsSchema, input);
}

/** True when agents authenticate with ServiceAccount tokens (any of the three flags is set). */
export function usesTokenAuth(
  o: Pick<ServerOptionsInput, "agentNamespace" | "agentServiceAccount" | "authenticationAudience">,
): boolean {
  return Boolean(o.agentNamespace || o.agentServiceAccount || o.authenticationAudience);
}

/**
 * The agent identity mode in effect: --agent-identity when given, else `certificate` with
 * --cluster-ca-cert and `shared` with ServiceAccount token authentication (one ServiceAccount
 * for every agent: nothing binds an agent to a cluster name).
 */
export function effectiveAgentIdentity(o: ServerOptionsInput): AgentIdentityMode {
  if (o.agentIdentity) return o.agentIdentity;
  return usesTokenAuth(o) ? "shared" : "certificate";
}

/** One front door listener: TCP (TLS unless `plain`) or a Unix socket (always plain). */
export type FrontDoor =
  | { protocol: "grpc" | "http-connect"; transport: "tcp"; port: number; host: string; plain: boolean; flag: string }
  | { protocol: "grpc" | "http-connect"; transport: "uds"; path: string; flag: string };

/** True for 127.0.0.0/8, ::1 and `localhost`. */
export function isLoopbackAddress(host: string): boolean {
  const h = host.trim().toLowerCase();
  if (h === "localhost" || h === "::1" || h === "[::1]") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (h.startsWith("::ffff:127.")) return true;
  return false;
}

/**
 * The front doors: in `grpc` mode --server-port / --uds-name serve gRPC; in `http-connect` mode
 * they serve HTTP CONNECT (as the Go server's modes); in `both` mode gRPC is on those and HTTP
 * CONNECT on --http-connect-port / --http-connect-uds-name. A port of 0 next to a Unix socket
 * means "socket only" (Go-compatible); a port of 0 alone picks a free port.
 */
export function planFrontDoors(o: ServerOptions): FrontDoor[] {
  const doors: FrontDoor[] = [];
  const add = (
    protocol: "grpc" | "http-connect",
    port: number,
    portFlag: string,
    host: string,
    uds: string,
    udsFlag: string,
  ): void => {
    if (!(port === 0 && uds !== "")) {
      const plain = protocol === "http-connect" && o.httpConnectPlain;
      doors.push({ protocol, transport: "tcp", port, host, plain, flag: portFlag });
    }
    if (uds !== "") doors.push({ protocol, transport: "uds", path: uds, flag: udsFlag });
  };
  const mainProtocol = o.mode === "http-connect" ? "http-connect" : "grpc";
  add(mainProtocol, o.serverPort, "--server-port", o.serverBindAddress, o.udsName, "--uds-name");
  if (o.mode === "both") {
    add(
      "http-connect",
      o.httpConnectPort,
      "--http-connect-port",
      o.httpConnectBindAddress || o.serverBindAddress,
      o.httpConnectUdsName,
      "--http-connect-uds-name",
    );
  }
  return doors;
}

/** The rules between the proxy-server's options (agent authentication, TLS profile, front doors). */
function serverCrossRules(
  o: ServerOptions,
  bad: (key: Extract<keyof ServerOptions, string>, why: string) => void,
): void {
  if (usesTokenAuth(o)) {
    // As the Go server: all three or none, and no client certificates next to tokens.
    if (o.clusterCaCert) {
      bad(
        "clusterCaCert",
        "cannot be used when agents authenticate with ServiceAccount tokens (--agent-namespace, --agent-service-account, --authentication-audience)",
      );
    }
    for (const key of ["agentNamespace", "agentServiceAccount", "authenticationAudience"] as const) {
      if (!o[key]) bad(key, "cannot be empty when agent token authentication is enabled");
    }
    if (effectiveAgentIdentity(o) === "certificate") {
      bad(
        "agentIdentity",
        "certificate needs agent certificates (--cluster-ca-cert); with ServiceAccount tokens use shared",
      );
    }
  } else if (!o.clusterCaCert) {
    bad(
      "clusterCaCert",
      "required (agents must present a certificate signed by this CA), unless agents authenticate with ServiceAccount tokens (--agent-namespace, --agent-service-account, --authentication-audience)",
    );
  }
  try {
    tlsProfileOptions(o.cipherSuites, o.tlsMinVersion);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // tlsProfileOptions names the flag; a bad --tls-min-version is the field's own problem
    const m = /^--cipher-suites: (.*)$/s.exec(err.message);
    if (m) bad("cipherSuites", m[1]!);
  }
  if (o.enableContentionProfiling && !o.enableProfiling)
    bad("enableContentionProfiling", "needs --enable-profiling, as in Go");
  if (o.httpConnectUdsName && o.mode !== "both") {
    bad("httpConnectUdsName", "only used with --mode=both (use --uds-name in --mode=http-connect)");
  }
  if (o.udsName && o.httpConnectUdsName && o.udsName === o.httpConnectUdsName) {
    bad("httpConnectUdsName", "must differ from --uds-name");
  }
  const doors = planFrontDoors(o);
  let needsServerTls = false;
  for (const door of doors) {
    if (door.transport !== "tcp") continue;
    if (door.plain) {
      if (!isLoopbackAddress(door.host)) {
        bad(
          "httpConnectPlain",
          `plain HTTP CONNECT is only allowed on a loopback address, but ${door.flag} binds to ${door.host === "" ? "all addresses" : `"${door.host}"`} (set ${door.protocol === "http-connect" && door.flag === "--server-port" ? "--server-bind-address" : "--http-connect-bind-address"}=127.0.0.1, or use a Unix socket)`,
        );
      }
      continue;
    }
    needsServerTls = true;
  }
  if (needsServerTls) {
    if (!o.serverCert)
      bad("serverCert", "required for the TCP front door (or serve only --uds-name with --server-port=0)");
    if (!o.serverKey) bad("serverKey", "required with --server-cert");
    if (!o.serverCaCert) {
      bad("serverCaCert", "required for the TCP front door (clients must present a certificate signed by this CA)");
    }
  }
  if (o.httpConnectPlain && !doors.some((d) => d.transport === "tcp" && d.plain)) {
    bad("httpConnectPlain", "no TCP HTTP CONNECT front door is configured");
  }
}
