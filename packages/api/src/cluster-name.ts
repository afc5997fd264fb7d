/**
 * The one validator of managed cluster names (a DNS-1123 label, what OCM accepts for a ManagedCluster),
 * used by every command and component that takes one. Imports nothing, so the PKI uses it too.
 * Design: docs/design/decisions.md#option-schemas-one-per-component-hand-written-builders-not-zod-cluster-names-are-dns-1123-labels
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
