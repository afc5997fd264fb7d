/** Labels and annotations the manager puts on what it creates, and reads back. */
export const LABEL_PREFIX = "proxy.open-cluster-management.io";
/** Name of the ManagedProxyConfiguration an object belongs to. */
export const CONFIGURATION_LABEL = `${LABEL_PREFIX}/configuration`;
/** The Go addon's component label (`proxy-server`); kept so its selectors and dashboards match (the CLI selects by it). */
export { COMPONENT_LABEL } from "@cluster-proxy/api";
/** Role of a CA Secret: serving, client or agent. */
export const SIGNER_LABEL = `${LABEL_PREFIX}/signer`;
export const MANAGED_BY_LABEL = "app.kubernetes.io/managed-by";
export const MANAGED_BY = "cluster-proxy-addon-manager";
/** Hash of the rendered spec of an object. */
export const SPEC_HASH_ANNOTATION = `${LABEL_PREFIX}/spec-hash`;
/** Hash of what a leaf certificate was issued for (issuer, names, usage). */
export const CERT_HASH_ANNOTATION = `${LABEL_PREFIX}/certificate-request-hash`;
/** When a leaf certificate was issued (its rotation is counted from here). */
export const ISSUED_AT_ANNOTATION = `${LABEL_PREFIX}/issued-at`;
/** On a CA Secret: fingerprints of CAs that this one replaced while their certificates were still in use. */
export const REPLACED_CA_ANNOTATION = `${LABEL_PREFIX}/replaced-ca-fingerprints`;

/** Labels of everything rendered for configuration `name`. */
export function ownedLabels(name: string): Record<string, string> {
  return { [CONFIGURATION_LABEL]: name, [MANAGED_BY_LABEL]: MANAGED_BY };
}
