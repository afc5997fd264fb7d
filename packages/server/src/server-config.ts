/**
 * Which listeners a set of server options asks for, and validation of those options. Every error
 * is a ConfigError naming the flag.
 */
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import {
  throwConfigProblems,
  DEFAULT_MAX_CONCURRENT_HANDSHAKES,
  DEFAULT_MAX_PENDING_HANDSHAKES,
  AGENT_IDENTITY_MODES,
  ConfigError,
  PROXY_STRATEGIES,
  tlsProfileOptions,
  type AgentIdentityMode,
  type ServerOptions,
} from "@cluster-proxy/api";

/** True when agents authenticate with ServiceAccount tokens (any of the three flags is set). */
export function usesTokenAuth(o: ServerOptions): boolean {
  return Boolean(o.agentNamespace || o.agentServiceAccount || o.authenticationAudience);
}

/**
 * The agent identity mode in effect: --agent-identity when given, else `certificate` with
 * --cluster-ca-cert and `shared` with ServiceAccount token authentication (one ServiceAccount
 * for every agent: nothing binds an agent to a cluster name).
 */
export function effectiveAgentIdentity(o: ServerOptions): AgentIdentityMode {
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

/**
 * Check options for consistency (files are checked when the server starts). Every problem found
 * is reported in one ConfigError, so a user fixes all missing flags in one go.
 */
export function validateServerOptions(o: ServerOptions): void {
  const problems: string[] = [];
  const attempt = (check: () => unknown): void => {
    try {
      check();
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(err.message);
    }
  };
  if (!["grpc", "http-connect", "both"].includes(o.mode)) {
    problems.push(`--mode: "${String(o.mode)}" is not one of grpc, http-connect, both`);
  }
  if (!o.clusterCert) problems.push("--cluster-cert: required (certificate of the agent port)");
  if (!o.clusterKey) problems.push("--cluster-key: required (private key of --cluster-cert)");
  if (usesTokenAuth(o)) {
    // As the Go server: all three or none, and no client certificates next to tokens.
    if (o.clusterCaCert) {
      problems.push(
        "--cluster-ca-cert: cannot be used when agents authenticate with ServiceAccount tokens (--agent-namespace, --agent-service-account, --authentication-audience)",
      );
    }
    for (const [flag, value] of [
      ["--agent-namespace", o.agentNamespace],
      ["--agent-service-account", o.agentServiceAccount],
      ["--authentication-audience", o.authenticationAudience],
    ] as const) {
      if (!value) problems.push(`${flag}: cannot be empty when agent token authentication is enabled`);
    }
    if (effectiveAgentIdentity(o) === "certificate") {
      problems.push(
        "--agent-identity: certificate needs agent certificates (--cluster-ca-cert); with ServiceAccount tokens use shared",
      );
    }
  } else if (!o.clusterCaCert) {
    problems.push(
      "--cluster-ca-cert: required (agents must present a certificate signed by this CA), unless agents authenticate with ServiceAccount tokens (--agent-namespace, --agent-service-account, --authentication-audience)",
    );
  }
  attempt(() => tlsProfileOptions(o.cipherSuites ?? [], o.tlsMinVersion ?? ""));
  for (const [flag, v] of [
    ["--kubeconfig-qps", o.kubeconfigQps ?? 0],
    ["--kubeconfig-burst", o.kubeconfigBurst ?? 0],
  ] as const) {
    if (!Number.isFinite(v) || v < 0) problems.push(`${flag}: must not be negative`);
  }
  const extra = o as ServerOptions & { xfrChannelSize?: number; enableContentionProfiling?: boolean };
  if (extra.xfrChannelSize !== undefined && extra.xfrChannelSize <= 0) {
    problems.push(`--xfr-channel-size: must be positive, got ${extra.xfrChannelSize}`);
  }
  if (extra.enableContentionProfiling && !o.enableProfiling) {
    problems.push("--enable-contention-profiling: needs --enable-profiling, as in Go");
  }
  if (o.agentIdentity && !(AGENT_IDENTITY_MODES as readonly string[]).includes(o.agentIdentity)) {
    problems.push(`--agent-identity: "${String(o.agentIdentity)}" is not one of ${AGENT_IDENTITY_MODES.join(", ")}`);
  }
  for (const ns of o.agentIdentityNamespaces ?? []) {
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(ns) || ns.length > 63) {
      problems.push(`--agent-identity-namespaces: "${ns}" is not a Kubernetes namespace name (a DNS-1123 label)`);
    }
  }
  if (o.proxyStrategies.length === 0) problems.push("--proxy-strategies: at least one strategy is needed");
  const seen = new Set<string>();
  for (const s of o.proxyStrategies) {
    if (!(PROXY_STRATEGIES as readonly string[]).includes(s)) {
      problems.push(`--proxy-strategies: "${s}" is not one of ${PROXY_STRATEGIES.join(", ")}`);
    }
    if (seen.has(s)) problems.push(`--proxy-strategies: "${s}" is listed twice`);
    seen.add(s);
  }
  if (!Number.isInteger(o.serverCount) || o.serverCount < 1) {
    problems.push(`--server-count: must be a positive integer, got ${o.serverCount}`);
  }
  for (const [flag, v] of [
    ["--keepalive-time", o.keepaliveTime],
    ["--keepalive-timeout", o.keepaliveTimeout ?? 0],
    ["--frontend-keepalive-time", o.frontendKeepaliveTime],
    ["--backend-dial-timeout", o.backendDialTimeout],
    ["--connection-stall-timeout", o.connectionStallTimeout],
    ["--graceful-shutdown-timeout", o.gracefulShutdownTimeout],
    ["--cert-reload-interval", o.certReloadInterval ?? 0],
  ] as const) {
    if (!Number.isFinite(v) || v < 0) problems.push(`${flag}: must not be negative`);
  }
  const handshakes = o.maxConcurrentHandshakes ?? DEFAULT_MAX_CONCURRENT_HANDSHAKES;
  if (!Number.isInteger(handshakes) || handshakes < 1) {
    problems.push(`--max-concurrent-handshakes: must be a positive integer, got ${handshakes}`);
  }
  const pending = o.maxPendingHandshakes ?? DEFAULT_MAX_PENDING_HANDSHAKES;
  if (!Number.isInteger(pending) || pending < 0) {
    problems.push(`--max-pending-handshakes: must not be negative, got ${pending}`);
  }
  if (o.httpConnectUdsName && o.mode !== "both") {
    problems.push("--http-connect-uds-name: only used with --mode=both (use --uds-name in --mode=http-connect)");
  }
  if (o.udsName && o.httpConnectUdsName && o.udsName === o.httpConnectUdsName) {
    problems.push("--http-connect-uds-name: must differ from --uds-name");
  }
  let doors: ReturnType<typeof planFrontDoors> = [];
  attempt(() => (doors = planFrontDoors(o)));
  let needsServerTls = false;
  for (const door of doors) {
    if (door.transport !== "tcp") continue;
    if (door.plain) {
      if (!isLoopbackAddress(door.host)) {
        problems.push(
          `--http-connect-plain: plain HTTP CONNECT is only allowed on a loopback address, but ${door.flag} binds to ${door.host === "" ? "all addresses" : `"${door.host}"`} (set ${door.protocol === "http-connect" && door.flag === "--server-port" ? "--server-bind-address" : "--http-connect-bind-address"}=127.0.0.1, or use a Unix socket)`,
        );
      }
      continue;
    }
    needsServerTls = true;
  }
  if (needsServerTls) {
    if (!o.serverCert)
      problems.push("--server-cert: required for the TCP front door (or serve only --uds-name with --server-port=0)");
    if (!o.serverKey) problems.push("--server-key: required with --server-cert");
    if (!o.serverCaCert) {
      problems.push(
        "--server-ca-cert: required for the TCP front door (clients must present a certificate signed by this CA)",
      );
    }
  }
  if (o.httpConnectPlain && !doors.some((d) => d.transport === "tcp" && d.plain)) {
    problems.push("--http-connect-plain: no TCP HTTP CONNECT front door is configured");
  }
  throwConfigProblems(problems);
}

/** The certificates of a PEM bundle (unreadable blocks are skipped: the TLS layer reports those). */
function pemCertificates(pem: Buffer | string): X509Certificate[] {
  const out: X509Certificate[] = [];
  for (const block of pem.toString().match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? []) {
    try {
      out.push(new X509Certificate(block));
    } catch {
      /* not a certificate */
    }
  }
  return out;
}

/**
 * Subjects of the CA certificates that both --server-ca-cert and --cluster-ca-cert trust. Any is
 * shared trust: a certificate issued for an agent (its key lives in a managed cluster) is then
 * accepted at the client front doors, and a client's at the agent port.
 */
export function sharedCaSubjects(serverCa: Buffer | string, clusterCa: Buffer | string): string[] {
  const agentSide = new Set(pemCertificates(clusterCa).map((c) => c.fingerprint256));
  return pemCertificates(serverCa)
    .filter((c) => agentSide.has(c.fingerprint256))
    .map((c) => c.subject.replace(/\n/g, ", "));
}
