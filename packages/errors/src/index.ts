/**
 * The error catalog ({@link ERROR_CATALOG}) and {@link ClusterProxyError}: every error a user or an SDK
 * caller sees has a stable, public `code` (never renamed). Imports nothing, so every package can use it.
 * Design: docs/design/decisions.md#one-error-catalog-in-cluster-proxyerrors
 */

/** One kind of error users or callers can see. */
export interface ErrorCatalogEntry {
  /** The stable code (`CP_ERR_*`) carried by the error's `code` property. */
  readonly code: `CP_ERR_${string}`;
  /** The classes that carry the code (or what reports it, when no class does). */
  readonly raisedBy: readonly string[];
  /** One line: what went wrong. */
  readonly summary: string;
  /** What to do about it, where that helps. */
  readonly fix?: string;
  /** Set for a code no error carries any more (kept so code that names it still compiles). */
  readonly deprecated?: string;
}

/** The catalog: one entry per code, keyed by the name used in {@link ErrorCodes}. */
export const ERROR_CATALOG = {
  config: {
    code: "CP_ERR_CONFIG",
    raisedBy: ["ConfigError"],
    summary:
      "A flag, option, configuration field or a file named by one is missing or wrong; the message names it and says why.",
    fix: "Correct the named flag, field or file (`cluster-proxy <command> --help` lists the flags).",
  },
  usage: {
    code: "CP_ERR_USAGE",
    raisedBy: ["the CLI's command-line parser"],
    summary: "The command line cannot be parsed: an unknown command or flag, or a flag without its value.",
    fix: "Run `cluster-proxy <command> --help`; the message suggests the closest flag.",
  },
  command: {
    code: "CP_ERR_COMMAND",
    raisedBy: ["CommandFailure"],
    summary:
      "A CLI command failed while running (a component did not start, the hub lacks an object it needs); the message says which step and why.",
  },
  portInUse: {
    code: "CP_ERR_PORT_IN_USE",
    raisedBy: ["PortInUseError"],
    summary: "A port the command listens on is taken (or may not be bound); the message names the port and its flag.",
    fix: "Stop what holds the port, or choose another with the named flag (`up`: `--port-base`).",
  },
  dialFailed: {
    code: "CP_ERR_DIAL_FAILED",
    raisedBy: ["DialError", "HttpConnectError"],
    summary:
      "A dial through the tunnel failed: no agent serves the cluster, the agent could not reach the target, the dial timed out or was aborted; `reason` says which.",
    fix: "Check the address (`<cluster>:<port>` or `<host>.<cluster>:<port>`), that the cluster's agent is connected (`cluster-proxy health`) and that the target accepts connections inside the cluster.",
  },
  tunnelClosed: {
    code: "CP_ERR_TUNNEL_CLOSED",
    raisedBy: ["TunnelClosedError"],
    summary:
      "An open tunnelled connection was cut: its agent or proxy-server went away, the link was lost, or the connection stalled.",
    fix: "Retry: agents reconnect with backoff and the client reconnects on the next dial.",
  },
  protocol: {
    code: "CP_ERR_PROTOCOL",
    raisedBy: ["ProtocolError"],
    summary: "A peer broke the konnectivity protocol (a malformed packet or an unexpected packet type).",
    fix: "Check that both ends speak the konnectivity gRPC protocol (matching versions of server, agent and client).",
  },
  connect: {
    code: "CP_ERR_CONNECT",
    raisedBy: ["ConnectError"],
    summary:
      "A tunnel connection to the proxy-server could not be established or was refused (unreachable, TLS verification failed, wrong protocol, refused stream).",
    fix: "Check the server address and port, the CA and client certificate flags; the message explains TLS failures.",
  },
  proxy: {
    code: "CP_ERR_PROXY",
    raisedBy: ["ProxyConnectError"],
    summary:
      "The HTTPS proxy (HTTPS_PROXY) is malformed, cannot be reached, or refused the CONNECT to the proxy-server.",
    fix: "Check HTTPS_PROXY and NO_PROXY, and that the proxy allows CONNECT to the server's port.",
  },
  timeout: {
    code: "CP_ERR_TIMEOUT",
    raisedBy: [],
    summary: "Reserved: no error carries this code.",
    deprecated:
      "timeouts are reported as CP_ERR_DIAL_FAILED (reason `timeout`) or CP_ERR_CONNECT; the code stays so that code naming it still compiles",
  },
  packetDecode: {
    code: "CP_ERR_PACKET_DECODE",
    raisedBy: ["PacketDecodeError"],
    summary: "Bytes received on a tunnel are not a well-formed konnectivity Packet.",
  },
  agentIdentifiers: {
    code: "CP_ERR_AGENT_IDENTIFIERS",
    raisedBy: ["IdentifiersError"],
    summary: "An agent's identifiers (`--agent-identifiers`, or its agentidentifiers header) are not valid.",
    fix: "Use `key=value` pairs joined by `&`, with keys host, cidr, ipv4, ipv6 or default-route.",
  },
  agentAuth: {
    code: "CP_ERR_AGENT_AUTH",
    raisedBy: ["AgentAuthError"],
    summary:
      "The proxy-server refused an agent's ServiceAccount token (not valid, wrong ServiceAccount or audience); the agent's Connect call ends UNAUTHENTICATED.",
    fix: "Check the agent's --service-account-token-path and the server's --agent-namespace, --agent-service-account and --authentication-audience.",
  },
  destinationRefused: {
    code: "CP_ERR_DESTINATION_REFUSED",
    raisedBy: ["DestinationRefusedError"],
    summary:
      "The agent's destination policy does not allow the dialled address; clients receive the refusal as the dial error.",
    fix: "Dial an allowed destination, or widen the agent's --destination-policy / --allow-destinations.",
  },
  tlsFile: {
    code: "CP_ERR_TLS_FILE",
    raisedBy: ["TlsFileError"],
    summary:
      "A certificate, key or CA file named by a flag or option cannot be read or used, at start or on reload; the message names the flag, the file and why (missing, unreadable, not PEM, key not the certificate's).",
    fix: "Point the flag at a readable PEM file (the key must belong to the certificate).",
  },
  certificate: {
    code: "CP_ERR_CERTIFICATE",
    raisedBy: ["CertificateError", "SingleCaLayoutError"],
    summary:
      "A certificate, key or CA is unusable, or a certificate directory cannot be written as asked (e.g. the single-CA layout of an older version).",
    fix: "Follow the message: `cluster-proxy certs --update` issues only what is missing (and migrates an old layout), `--force` replaces the set.",
  },
  kubeApi: {
    code: "CP_ERR_KUBE_API",
    raisedBy: ["KubeApiError"],
    summary: "A Kubernetes API server answered a request with an error status (`status` and `reason` say which).",
    fix: "Check the credentials' RBAC permissions and that the hub's CRDs are installed.",
  },
} as const satisfies Record<string, ErrorCatalogEntry>;

/** Every code in the catalog. */
export type ErrorCode = (typeof ERROR_CATALOG)[keyof typeof ERROR_CATALOG]["code"];

/** The catalog's codes by name (`ErrorCodes.dialFailed === "CP_ERR_DIAL_FAILED"`). */
export const ErrorCodes = Object.freeze(
  Object.fromEntries(Object.entries(ERROR_CATALOG).map(([name, entry]) => [name, entry.code])),
) as { readonly [K in keyof typeof ERROR_CATALOG]: (typeof ERROR_CATALOG)[K]["code"] };

/** The catalog's entries in table order. */
export const errorCatalogEntries: readonly (ErrorCatalogEntry & { readonly code: ErrorCode })[] =
  Object.values(ERROR_CATALOG);

/**
 * The base class of every error a user or caller can see: a stable `code` from
 * {@link ERROR_CATALOG}, and the `cause` it was raised for (ErrorOptions), if any.
 */
export class ClusterProxyError<C extends ErrorCode = ErrorCode> extends Error {
  constructor(
    readonly code: C,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "ClusterProxyError";
  }
}

/** True when `err` is a {@link ClusterProxyError} (of any code). */
export function isClusterProxyError(err: unknown): err is ClusterProxyError {
  return err instanceof ClusterProxyError;
}

/** The message of a thrown value: an Error's `message`, anything else as text. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A flag, file or value the user gave is wrong; the message names it. */
export class ConfigError extends ClusterProxyError<typeof ErrorCodes.config> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.config, message, options);
    this.name = "ConfigError";
  }
}

/**
 * The words of every DIAL_RSP error our agent sends for a destination its policy refuses
 * (`dial to <address> refused by the agent's destination policy (…)`); the server's HTTP CONNECT
 * door answers such dials with 403.
 */
export const DESTINATION_POLICY_REFUSAL = "refused by the agent's destination policy";
