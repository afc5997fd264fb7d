/**
 * @cluster-proxy/pki: a certificate authority, leaf certificates, the per-cluster agent
 * identity encoding, and the certificate set of a standalone deployment.
 */
export * from "./certificates.js";
export * from "./agent-identity.js";
export * from "./standalone-certs.js";
