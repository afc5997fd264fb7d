/**
 * @cluster-proxy/pki: a certificate authority, leaf certificates, the per-cluster agent
 * identity encoding, and the certificate set of a standalone deployment.
 */
export {
  type CertificateAndKey,
  CertificateError,
  createCertificateAuthority,
  issueCertificate,
  parseCertificateRequest,
  type ParsedCertificateRequest,
  signCertificateRequest,
} from "./certificates.js";
export { agentClusterUri, clusterNamesFromCertificate } from "./agent-identity.js";
export {
  type CertKeyPaths,
  ensureStandaloneCerts,
  existingStandaloneCerts,
  SingleCaLayoutError,
  type StandaloneCertPaths,
  writeStandaloneCerts,
} from "./standalone-certs.js";
