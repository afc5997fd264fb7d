/**
 * The addon manager's options (`cluster-proxy addon-manager`): one schema (types, defaults, rules,
 * flags). Flag names shared with the Go cluster-proxy addon manager mean the same thing there.
 */
import { DEFAULT_IMPERSONATION_PREFIX } from "./agent-options.js";
import { isDns1123Label } from "./cluster-name.js";
import { LOG_FORMAT_FIELD } from "./log-options.js";
import { defineOptions, opt, parseOptions, type OptionsInputOf, type OptionsOf } from "./option-schema.js";

function placementProblem(placement: string): string | undefined {
  const [namespace = "", name = "", ...rest] = placement.split("/");
  return placement && (rest.length > 0 || !isDns1123Label(namespace) || !isDns1123Label(name))
    ? `"${placement}" is not <namespace>/<name> of a Placement`
    : undefined;
}

const DAY_MS = 86_400_000;

/** The addon manager's option fields (in flag-reference order). */
const addonManagerOptionFields = {
  kubeconfig: opt.path("", {
    flag: "kubeconfig",
    env: "KUBECONFIG",
    description: "Kubeconfig of the hub; empty: the in-cluster service account",
  }),
  namespace: opt.string("open-cluster-management-addon", {
    flag: "namespace",
    env: "POD_NAMESPACE",
    description: "Namespace the manager runs in: its leader-election Lease and Events about itself live here",
  }),
  signerSecretNamespace: opt.string("", {
    flag: "signer-secret-namespace",
    description:
      "Namespace of the CA Secrets (default: --namespace). They are owned by nothing, so deleting a ManagedProxyConfiguration or reinstalling keeps them",
  }),
  signerSecretName: opt.string("cluster-proxy-signer", {
    flag: "signer-secret-name",
    description:
      "Name of the serving CA Secret (ca.crt, ca.key); the client and agent CAs are <name>-client and <name>-agent beside it",
  }),
  leaderElect: opt.boolean(true, {
    flag: "leader-elect",
    description: "Elect one active manager with a coordination.k8s.io Lease, so replicas never act at once",
  }),
  leaderElectionId: opt.string("cluster-proxy-addon-manager", {
    flag: "leader-election-id",
    description: "Name of the leader-election Lease in --namespace",
  }),
  leaseDuration: opt.duration(15_000, {
    flag: "leader-elect-lease-duration",
    description: "How long a standby waits after the last renewal it saw before it takes over",
  }),
  renewDeadline: opt.duration(10_000, {
    flag: "leader-elect-renew-deadline",
    description: "The leader stops acting (and exits) when it could not renew for this long",
  }),
  retryPeriod: opt.duration(2_000, {
    flag: "leader-elect-retry-period",
    description: "Interval of renewals and of a standby's attempts",
  }),
  healthProbeBindAddress: opt.string(":58081", {
    flag: "health-probe-bind-address",
    description: "host:port of /healthz and /readyz (empty: off)",
  }),
  metricsBindAddress: opt.string(":58080", {
    flag: "metrics-bind-address",
    description: "host:port of /metrics (Prometheus; empty: off). May equal --health-probe-bind-address",
  }),
  certValidity: opt.duration(180 * DAY_MS, {
    flag: "cert-validity",
    description: "Validity of the leaf certificates the manager issues",
  }),
  certRefreshAfter: opt.duration(0, {
    flag: "cert-refresh-after",
    description: "Re-issue a leaf certificate once it is this old (0: at 80% of its validity)",
  }),
  csrCleanupAfter: opt.duration(120_000, {
    flag: "csr-cleanup-after",
    description:
      "Delete an agent certificate request the manager approved this long after its certificate was issued (OCM's registration agent collects it at once), or at once when a newer request of the same cluster and signer exists, so that reinstalls never reach OCM's limit of 10 requests per cluster and addon; only requests of the addon that the manager approved. 0: never (kube-controller-manager's cleaner removes them after an hour)",
  }),
  caValidity: opt.duration(3650 * DAY_MS, {
    flag: "ca-validity",
    description:
      "Validity of a self-signed CA; a new CA is made at 80% of it and both are trusted until the old one expires",
  }),
  resyncPeriod: opt.duration(600_000, {
    flag: "resync-period",
    description: "Reconcile every configuration at least this often, even without changes",
  }),
  installPlacement: opt.string(
    "",
    {
      flag: "install-placement",
      description:
        "<namespace>/<name> of a Placement: the ClusterManagementAddOn the manager creates when it is missing installs the agent into every cluster it selects, including clusters that join later (install strategy Placements). Empty: install strategy Manual (create a ManagedClusterAddOn per cluster). An existing ClusterManagementAddOn is left as it is",
    },
    placementProblem,
  ),
  tunnelProbeInterval: opt.duration(3_000, {
    flag: "tunnel-probe-interval",
    description:
      "How often each cluster's tunnel is probed through every proxy-server replica (a CONNECT to <cluster>:443 at each pod's address): what each ManagedClusterAddOn's Available reports (0 disables probing; Available is then Unknown)",
  }),
  tunnelProbeTimeout: opt.duration(4_000, {
    flag: "tunnel-probe-timeout",
    description:
      "A probe not answered within this time fails; a replica counts as failing after two failed probes in a row (the second at once), so a cut-off cluster is reported within about interval + 2 x timeout",
  }),
  clusterProfiles: opt.boolean(false, {
    flag: "cluster-profiles",
    description:
      "Keep the access provider cluster-proxy (the gateway's address and serving CA bundle, and the cluster's name for `cluster-proxy credential`) in the status of every ClusterProfile (multicluster.x-k8s.io/v1alpha1) of a managed cluster with the addon, and remove it when the addon leaves; off when the ClusterProfile API is not served",
  }),
  clusterProfileServer: opt.string("", {
    flag: "cluster-profile-server",
    description:
      "Base URL of the gateway written into ClusterProfiles (the cluster's name is appended); empty: https://cluster-proxy-addon-user.<proxy-server namespace>.svc:9092",
  }),
  gatewayImpersonationPrefix: opt.string(
    DEFAULT_IMPERSONATION_PREFIX,
    {
      flag: "gateway-impersonation-prefix",
      description:
        "The gateway's --impersonation-prefix, rendered into every agent's --gateway-impersonation-prefix: an agent serves only impersonations carrying it (the chart sets both from gateway.impersonationPrefix, so they cannot drift)",
    },
    (v) => (v === "" ? "must not be empty (the agents refuse unprefixed impersonation)" : undefined),
  ),
  identity: opt.string("", {
    flag: "identity",
    env: "POD_NAME",
    description: "This replica's name in the leader-election Lease (default: hostname and a random suffix)",
  }),
  podUid: opt.string("", {
    flag: "pod-uid",
    env: "POD_UID",
    description:
      "The uid of this replica's pod, named by --identity in --namespace (the chart sets both from the downward API): the Lease this replica holds then names its pod, and a standby takes the Lease at once when the apiserver says that pod no longer exists (404), instead of waiting for the Lease to expire",
  }),
  logLevel: opt.choice(["debug", "info", "warn", "error"] as const, "info", {
    flag: "log-level",
    description: "Log level",
  }),
  logFormat: LOG_FORMAT_FIELD,
};

/** The addon manager's option schema. */
export const addonManagerOptionsSchema = defineOptions(addonManagerOptionFields);

/** The addon manager's flags (help, README reference, Helm values). */
export const addonManagerOptionSpecs = addonManagerOptionsSchema.specs;

/** The addon manager's options, validated, every default applied. */
export type AddonManagerOptions = OptionsOf<typeof addonManagerOptionFields>;
/** What a caller may give the addon manager (options with a default may be left out). */
export type AddonManagerOptionsInput = OptionsInputOf<typeof addonManagerOptionFields>;

/** Validate addon manager options and apply the defaults; one ConfigError names every bad flag. */
export function parseAddonManagerOptions(input: AddonManagerOptionsInput): AddonManagerOptions {
  return parseOptions(addonManagerOptionsSchema, input);
}
