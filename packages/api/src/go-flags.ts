/**
 * Every flag of the Go konnectivity proxy-server and proxy-agent (apiserver-network-proxy
 * v0.36.0, klog flags included) with its Go type and default as their `--help` prints them. The
 * compatibility table in the README is generated from this list and our option schemas; a test
 * checks that each of these flags is in our schemas, and an interop test that the list matches
 * the real binaries' `--help`.
 */

/** One Go flag: name, pflag type, default as printed ("" when none is printed). */
export interface GoFlag {
  flag: string;
  type: string;
  default: string;
  /** Hidden in Go's `--help` (deprecated). */
  hidden?: boolean;
}

/** The Go proxy-server's flags. */
export const GO_SERVER_FLAGS: readonly GoFlag[] = [
  { flag: "add-dir-header", type: "bool", default: "" },
  { flag: "admin-bind-address", type: "string", default: "127.0.0.1" },
  { flag: "admin-port", type: "int", default: "8095" },
  { flag: "agent-bind-address", type: "string", default: "" },
  { flag: "agent-namespace", type: "string", default: "" },
  { flag: "agent-port", type: "int", default: "8091" },
  { flag: "agent-service-account", type: "string", default: "" },
  { flag: "alsologtostderr", type: "bool", default: "" },
  { flag: "alsologtostderrthreshold", type: "severity", default: "" },
  { flag: "authentication-audience", type: "string", default: "" },
  { flag: "backend-dial-timeout", type: "duration", default: "" },
  { flag: "cipher-suites", type: "strings", default: "" },
  { flag: "cluster-ca-cert", type: "string", default: "" },
  { flag: "cluster-cert", type: "string", default: "" },
  { flag: "cluster-key", type: "string", default: "" },
  { flag: "delete-existing-uds-file", type: "bool", default: "true" },
  { flag: "enable-contention-profiling", type: "bool", default: "" },
  { flag: "enable-lease-controller", type: "bool", default: "" },
  { flag: "enable-profiling", type: "bool", default: "" },
  { flag: "frontend-keepalive-time", type: "duration", default: "1h0m0s" },
  { flag: "graceful-shutdown-timeout", type: "duration", default: "" },
  { flag: "health-bind-address", type: "string", default: "" },
  { flag: "health-port", type: "int", default: "8092" },
  { flag: "keepalive-time", type: "duration", default: "1h0m0s" },
  { flag: "kube-api-content-type", type: "string", default: "application/vnd.kubernetes.protobuf" },
  { flag: "kubeconfig", type: "string", default: "" },
  { flag: "kubeconfig-burst", type: "int", default: "" },
  { flag: "kubeconfig-qps", type: "float32", default: "" },
  { flag: "lease-label", type: "string", default: "k8s-app=konnectivity-server" },
  { flag: "lease-namespace", type: "string", default: "kube-system" },
  { flag: "legacy-stderr-threshold-behavior", type: "bool", default: "true" },
  { flag: "log-backtrace-at", type: "traceLocation", default: ":0" },
  { flag: "log-dir", type: "string", default: "" },
  { flag: "log-file", type: "string", default: "" },
  { flag: "log-file-max-size", type: "uint", default: "1800" },
  { flag: "logtostderr", type: "bool", default: "true" },
  { flag: "mode", type: "string", default: "grpc" },
  { flag: "one-output", type: "bool", default: "" },
  { flag: "proxy-strategies", type: "string", default: "default" },
  { flag: "server-bind-address", type: "string", default: "" },
  { flag: "server-ca-cert", type: "string", default: "" },
  { flag: "server-cert", type: "string", default: "" },
  { flag: "server-count", type: "int", default: "1" },
  { flag: "server-id", type: "string", default: "" },
  { flag: "server-key", type: "string", default: "" },
  { flag: "server-port", type: "int", default: "8090" },
  { flag: "skip-headers", type: "bool", default: "" },
  { flag: "skip-log-headers", type: "bool", default: "" },
  { flag: "stderrthreshold", type: "severity", default: "2" },
  { flag: "tls-min-version", type: "string", default: "" },
  { flag: "uds-name", type: "string", default: "" },
  { flag: "v", type: "Level", default: "4" },
  { flag: "vmodule", type: "moduleSpec", default: "" },
  { flag: "xfr-channel-size", type: "int", default: "10" },
  { flag: "warn-on-channel-limit", type: "bool", default: "true", hidden: true },
];

/** The Go proxy-agent's flags. */
export const GO_AGENT_FLAGS: readonly GoFlag[] = [
  { flag: "add-dir-header", type: "bool", default: "" },
  { flag: "admin-bind-address", type: "string", default: "127.0.0.1" },
  { flag: "admin-server-port", type: "int", default: "8094" },
  { flag: "agent-cert", type: "string", default: "" },
  { flag: "agent-id", type: "string", default: "" },
  { flag: "agent-identifiers", type: "string", default: "" },
  { flag: "agent-key", type: "string", default: "" },
  { flag: "alpn-proto", type: "strings", default: "" },
  { flag: "alsologtostderr", type: "bool", default: "" },
  { flag: "alsologtostderrthreshold", type: "severity", default: "" },
  { flag: "ca-cert", type: "string", default: "" },
  { flag: "count-server-leases", type: "bool", default: "" },
  { flag: "enable-contention-profiling", type: "bool", default: "" },
  { flag: "enable-profiling", type: "bool", default: "" },
  { flag: "health-server-host", type: "string", default: "" },
  { flag: "health-server-port", type: "int", default: "8093" },
  { flag: "keepalive-time", type: "duration", default: "1h0m0s" },
  { flag: "kube-api-content-type", type: "string", default: "application/vnd.kubernetes.protobuf" },
  { flag: "kubeconfig", type: "string", default: "" },
  { flag: "lease-label", type: "string", default: "k8s-app=konnectivity-server" },
  { flag: "lease-namespace", type: "string", default: "kube-system" },
  { flag: "legacy-stderr-threshold-behavior", type: "bool", default: "true" },
  { flag: "log-backtrace-at", type: "traceLocation", default: ":0" },
  { flag: "log-dir", type: "string", default: "" },
  { flag: "log-file", type: "string", default: "" },
  { flag: "log-file-max-size", type: "uint", default: "1800" },
  { flag: "logtostderr", type: "bool", default: "true" },
  { flag: "one-output", type: "bool", default: "" },
  { flag: "probe-interval", type: "duration", default: "1s" },
  { flag: "proxy-server-host", type: "string", default: "127.0.0.1" },
  { flag: "proxy-server-port", type: "int", default: "8091" },
  { flag: "server-count-source", type: "string", default: "default" },
  { flag: "service-account-token-path", type: "string", default: "" },
  { flag: "skip-headers", type: "bool", default: "" },
  { flag: "skip-log-headers", type: "bool", default: "" },
  { flag: "stderrthreshold", type: "severity", default: "2" },
  { flag: "sync-forever", type: "bool", default: "" },
  { flag: "sync-interval", type: "duration", default: "1s" },
  { flag: "sync-interval-cap", type: "duration", default: "10s" },
  { flag: "v", type: "Level", default: "4" },
  { flag: "vmodule", type: "moduleSpec", default: "" },
  { flag: "warn-on-channel-limit", type: "bool", default: "" },
  { flag: "xfr-channel-size", type: "int", default: "150" },
];
