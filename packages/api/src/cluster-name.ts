/**
 * The one validator of managed cluster names, used by every command and component that takes one
 * (`agent --cluster-name`, `certs --cluster`, `up --clusters`, `health --cluster`,
 * `kubeconfig --cluster`, the agent certificates' cluster grants).
 *
 * The rule is what Open Cluster Management accepts for a ManagedCluster name: OCM's registration
 * webhook (open-cluster-management-io/ocm, pkg/registration/webhook/v1/managedcluster_validating.go,
 * `validateManagedClusterObj`) and the klusterlet's `--cluster-name` check (pkg/common/options,
 * `AgentOptions.Validate`) both call Kubernetes' `ValidateNamespaceName`, because the cluster name
 * becomes the cluster's namespace on the hub. That is a DNS-1123 label: at most 63 characters,
 * lowercase letters, digits and `-`, starting and ending with a letter or digit. No dots, so
 * `<host>.<cluster>:<port>` dial targets stay unambiguous. A leading digit is fine (`7staging`).
 *
 * This module imports nothing, so low layers (the PKI) use it without loading the schemas.
 */

/** Longest cluster name (a DNS-1123 label). */
export const CLUSTER_NAME_MAX_LENGTH = 63;

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** The rule, as error messages and `--help` state it. */
export const CLUSTER_NAME_RULE =
  'use lowercase letters, digits and "-", starting and ending with a letter or digit, at most 63 characters (a DNS-1123 label, as OCM requires of a ManagedCluster name)';

/**
 * True for a DNS-1123 label (what Kubernetes accepts as a namespace name): at most 63 characters,
 * lowercase letters, digits and `-`, a letter or digit at both ends.
 */
export function isDns1123Label(name: string): boolean {
  return name.length <= CLUSTER_NAME_MAX_LENGTH && DNS1123_LABEL.test(name);
}

/**
 * Why `name` is not a valid cluster name (`cluster name "East_1" is invalid: use lowercase ...`),
 * or undefined when it is one.
 */
export function clusterNameProblem(name: string): string | undefined {
  if (isDns1123Label(name)) return undefined;
  const why = name.length > CLUSTER_NAME_MAX_LENGTH ? `${name.length} characters; ` : "";
  return `cluster name "${name}" is invalid: ${why}${CLUSTER_NAME_RULE}`;
}

/** True when `name` is a valid cluster name (see {@link clusterNameProblem}). */
export function isClusterName(name: string): boolean {
  return clusterNameProblem(name) === undefined;
}
