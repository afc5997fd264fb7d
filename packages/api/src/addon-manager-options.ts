/**
 * The addon manager's options (`cluster-proxy addon-manager`). Flag names shared with the Go
 * cluster-proxy addon manager mean the same thing there.
 */
import type { OptionSpec } from "./options.js";

export interface AddonManagerOptions {
  kubeconfig: string;
  namespace: string;
  signerSecretNamespace: string;
  signerSecretName: string;
  leaderElect: boolean;
  leaderElectionId: string;
  leaseDuration: number;
  renewDeadline: number;
  retryPeriod: number;
  healthProbeBindAddress: string;
  metricsBindAddress: string;
  certValidity: number;
  certRefreshAfter: number;
  caValidity: number;
  resyncPeriod: number;
  tunnelProbeInterval: number;
  installPlacement: string;
  tunnelProbeTimeout: number;
  identity: string;
  logLevel: string;
}

const DAY_MS = 86_400_000;

export const addonManagerOptionSpecs: readonly OptionSpec[] = [
  {
    key: "kubeconfig",
    flag: "kubeconfig",
    kind: "path",
    default: "",
    env: "KUBECONFIG",
    description: "Kubeconfig of the hub; empty: the in-cluster service account",
  },
  {
    key: "namespace",
    flag: "namespace",
    kind: "string",
    default: "open-cluster-management-addon",
    env: "POD_NAMESPACE",
    description: "Namespace the manager runs in: its leader-election Lease and Events about itself live here",
  },
  {
    key: "signerSecretNamespace",
    flag: "signer-secret-namespace",
    kind: "string",
    default: "",
    description:
      "Namespace of the CA Secrets (default: --namespace). They are owned by nothing, so deleting a ManagedProxyConfiguration or reinstalling keeps them",
  },
  {
    key: "signerSecretName",
    flag: "signer-secret-name",
    kind: "string",
    default: "cluster-proxy-signer",
    description:
      "Name of the serving CA Secret (ca.crt, ca.key); the client and agent CAs are <name>-client and <name>-agent beside it",
  },
  {
    key: "leaderElect",
    flag: "leader-elect",
    kind: "boolean",
    default: true,
    description: "Elect one active manager with a coordination.k8s.io Lease, so replicas never act at once",
  },
  {
    key: "leaderElectionId",
    flag: "leader-election-id",
    kind: "string",
    default: "cluster-proxy-addon-manager",
    description: "Name of the leader-election Lease in --namespace",
  },
  {
    key: "leaseDuration",
    flag: "leader-elect-lease-duration",
    kind: "duration",
    default: 15_000,
    description: "How long a standby waits after the last renewal it saw before it takes over",
  },
  {
    key: "renewDeadline",
    flag: "leader-elect-renew-deadline",
    kind: "duration",
    default: 10_000,
    description: "The leader stops acting (and exits) when it could not renew for this long",
  },
  {
    key: "retryPeriod",
    flag: "leader-elect-retry-period",
    kind: "duration",
    default: 2_000,
    description: "Interval of renewals and of a standby's attempts",
  },
  {
    key: "healthProbeBindAddress",
    flag: "health-probe-bind-address",
    kind: "string",
    default: ":58081",
    description: "host:port of /healthz and /readyz (empty: off)",
  },
  {
    key: "metricsBindAddress",
    flag: "metrics-bind-address",
    kind: "string",
    default: ":58080",
    description: "host:port of /metrics (Prometheus; empty: off). May equal --health-probe-bind-address",
  },
  {
    key: "certValidity",
    flag: "cert-validity",
    kind: "duration",
    default: 180 * DAY_MS,
    description: "Validity of the leaf certificates the manager issues",
  },
  {
    key: "certRefreshAfter",
    flag: "cert-refresh-after",
    kind: "duration",
    default: 0,
    description: "Re-issue a leaf certificate once it is this old (0: at 80% of its validity)",
  },
  {
    key: "caValidity",
    flag: "ca-validity",
    kind: "duration",
    default: 3650 * DAY_MS,
    description:
      "Validity of a self-signed CA; a new CA is made at 80% of it and both are trusted until the old one expires",
  },
  {
    key: "resyncPeriod",
    flag: "resync-period",
    kind: "duration",
    default: 600_000,
    description: "Reconcile every configuration at least this often, even without changes",
  },
  {
    key: "installPlacement",
    flag: "install-placement",
    kind: "string",
    default: "",
    description:
      "<namespace>/<name> of a Placement: the ClusterManagementAddOn the manager creates when it is missing installs the agent into every cluster it selects, including clusters that join later (install strategy Placements). Empty: install strategy Manual (create a ManagedClusterAddOn per cluster). An existing ClusterManagementAddOn is left as it is",
  },
  {
    key: "tunnelProbeInterval",
    flag: "tunnel-probe-interval",
    kind: "duration",
    default: 3_000,
    description:
      "How often each cluster's tunnel is probed through every proxy-server replica (a CONNECT to <cluster>:443 at each pod's address): what each ManagedClusterAddOn's Available reports (0 disables probing; Available is then Unknown)",
  },
  {
    key: "tunnelProbeTimeout",
    flag: "tunnel-probe-timeout",
    kind: "duration",
    default: 4_000,
    description:
      "A probe not answered within this time fails; a replica counts as failing after two failed probes in a row (the second at once), so a cut-off cluster is reported within about interval + 2 x timeout",
  },
  {
    key: "identity",
    flag: "identity",
    kind: "string",
    default: "",
    env: "POD_NAME",
    description: "This replica's name in the leader-election Lease (default: hostname and a random suffix)",
  },
  {
    key: "logLevel",
    flag: "log-level",
    kind: "string",
    default: "info",
    choices: ["debug", "info", "warn", "error"],
    description: "Log level",
  },
];
