/**
 * The manager's certificate authorities (serving, client, agent, gateway: trust split by role) and the
 * leaf certificates they issue; CA Secrets have no owner, and a CA is replaced at 80% of its validity.
 * Design: docs/design/pki.md#four-cas-split-by-role
 */
import { X509Certificate, createHash, createPrivateKey, createPublicKey } from "node:crypto";
import {
  CertificateError,
  createCertificateAuthority,
  issueCertificate,
  type CertificateAndKey,
} from "@cluster-proxy/pki";
import { isAlreadyExists, isConflict, type KubeApi, type KubeObject } from "@cluster-proxy/kube";
import { Resources } from "./resources.js";
import {
  CERT_HASH_ANNOTATION,
  ISSUED_AT_ANNOTATION,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  REPLACED_CA_ANNOTATION,
  SIGNER_LABEL,
} from "./labels.js";
import { realClock, type Clock } from "@cluster-proxy/kit";

/** What a CA signs (and so who trusts it). */
export type SignerRole = "serving" | "client" | "agent" | "gateway";

/** A CA the manager signs with. */
export interface SigningCa {
  role: SignerRole;
  cert: CertificateAndKey;
  /** PEM of every CA certificate to trust (current first). */
  bundlePem: string;
  notAfter: Date;
  fingerprint: string;
  /** Where it is kept, `namespace/name`. */
  secret: string;
  /** Fingerprints of earlier CAs this one replaced while they were in use (reported in status). */
  replaced: string[];
}

export interface SecretObject extends KubeObject {
  type?: string;
  data?: Record<string, string>;
}

const b64 = (s: string): string => Buffer.from(s, "utf8").toString("base64");
export const unb64 = (s: string | undefined): string => (s ? Buffer.from(s, "base64").toString("utf8") : "");

/** The PEM certificates in `pem`, each as its own PEM block. */
export function splitPem(pem: string): string[] {
  return pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
}

export function fingerprintOf(pem: string): string {
  return "sha256:" + new X509Certificate(pem).fingerprint256.replaceAll(":", "").toLowerCase();
}

const DAY_MS = 86_400_000;

export interface CaPolicy {
  caValidityMs: number;
  /** What "now" is for validity and rotation (default {@link realClock}). */
  clock?: Clock;
}

/**
 * Read the CA in Secret `namespace/name`, creating it when missing (`create` false: it must
 * exist, for a Provided CA) and replacing it at 80% of its life (self-signed only).
 */
export async function ensureCa(
  api: KubeApi,
  role: SignerRole,
  namespace: string,
  name: string,
  policy: CaPolicy & { create: boolean },
): Promise<SigningCa> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await readOrWriteCa(api, role, namespace, name, policy);
    } catch (err) {
      // Someone else (another manager during a hand-over) created or changed it first: read theirs,
      // a bounded number of times (a writer that keeps winning is reported, not chased forever).
      if (!(isAlreadyExists(err) || isConflict(err)) || attempt >= CA_WRITE_ATTEMPTS) throw err;
    }
  }
}

/** How many times `ensureCa` reads the CA again after losing a write to another writer. */
const CA_WRITE_ATTEMPTS = 3;

async function readOrWriteCa(
  api: KubeApi,
  role: SignerRole,
  namespace: string,
  name: string,
  policy: CaPolicy & { create: boolean },
): Promise<SigningCa> {
  const now = (policy.clock ?? realClock).now();
  const secret = await api.tryGet<SecretObject>(Resources.secret, name, namespace);
  if (!secret) {
    if (!policy.create) throw new CertificateError(`Secret ${namespace}/${name} with the provided CA does not exist`);
    const created = await createCaSecret(api, role, namespace, name, policy.caValidityMs, now, []);
    return created;
  }
  const certPem = unb64(secret.data?.["ca.crt"] ?? secret.data?.["tls.crt"]);
  const keyPem = unb64(secret.data?.["ca.key"] ?? secret.data?.["tls.key"]);
  const current = splitPem(certPem)[0];
  if (!current || keyPem === "")
    throw new CertificateError(
      `Secret ${namespace}/${name} must hold a CA certificate and key (ca.crt and ca.key, or tls.crt and tls.key)`,
    );
  const x = new X509Certificate(current);
  if (!x.ca)
    throw new CertificateError(`Secret ${namespace}/${name}: the certificate is not a CA (basicConstraints CA:FALSE)`);
  if (!keyMatches(current, keyPem))
    throw new CertificateError(`Secret ${namespace}/${name}: the key does not belong to the CA certificate`);
  const notBefore = Date.parse(x.validFrom);
  const notAfter = Date.parse(x.validTo);
  if (policy.create && now >= notBefore + (notAfter - notBefore) * 0.8) {
    // Rotate: a new CA; the old one stays in the bundle until it expires.
    const keep = Date.parse(x.validTo) > now ? [current] : [];
    return createCaSecret(api, role, namespace, name, policy.caValidityMs, now, keep, secret);
  }
  const bundle = [current, ...splitPem(unb64(secret.data?.["ca-bundle.crt"])).filter((p) => p !== current)].filter(
    (p) => Date.parse(new X509Certificate(p).validTo) > now,
  );
  const replaced = (secret.metadata.annotations?.[REPLACED_CA_ANNOTATION] ?? "").split(",").filter(Boolean);
  return {
    role,
    cert: { certPem: current + "\n", keyPem },
    bundlePem: bundle.join("\n") + "\n",
    notAfter: new Date(notAfter),
    fingerprint: fingerprintOf(current),
    secret: `${namespace}/${name}`,
    replaced,
  };
}

/** Record that the CA in `ca.secret` replaced CAs whose certificates were still published. */
export async function recordReplacedCa(api: KubeApi, ca: SigningCa, fingerprints: string[]): Promise<void> {
  const [namespace, name] = ca.secret.split("/") as [string, string];
  const all = [...new Set([...ca.replaced, ...fingerprints])];
  await api.apply(Resources.secret, {
    metadata: { name, namespace, annotations: { [REPLACED_CA_ANNOTATION]: all.join(",") } },
  });
  ca.replaced = all;
}

async function createCaSecret(
  api: KubeApi,
  role: SignerRole,
  namespace: string,
  name: string,
  validityMs: number,
  now: number,
  keep: string[],
  existing?: SecretObject,
): Promise<SigningCa> {
  const cert = await createCertificateAuthority({
    commonName: `cluster-proxy-${role}-ca@${Math.floor(now / 1000)}`,
    organization: "open-cluster-management:cluster-proxy",
    validityDays: Math.max(1, validityMs / DAY_MS),
  });
  const bundle = [cert.certPem.trim(), ...keep];
  const body: SecretObject = {
    metadata: {
      name,
      namespace,
      labels: { [SIGNER_LABEL]: role, [MANAGED_BY_LABEL]: MANAGED_BY },
      ...(existing ? { resourceVersion: existing.metadata.resourceVersion! } : {}),
    },
    type: "Opaque",
    data: { "ca.crt": b64(cert.certPem), "ca.key": b64(cert.keyPem), "ca-bundle.crt": b64(bundle.join("\n") + "\n") },
  };
  if (existing) await api.replace(Resources.secret, body);
  else await api.create(Resources.secret, body);
  return {
    role,
    cert,
    bundlePem: bundle.join("\n") + "\n",
    notAfter: new Date(Date.parse(new X509Certificate(cert.certPem).validTo)),
    fingerprint: fingerprintOf(cert.certPem),
    secret: `${namespace}/${name}`,
    replaced: [],
  };
}

function keyMatches(certPem: string, keyPem: string): boolean {
  try {
    const pub = new X509Certificate(certPem).publicKey.export({ type: "spki", format: "der" });
    const fromKey = createPublicKey(createPrivateKey(keyPem)).export({ type: "spki", format: "der" });
    return pub.equals(fromKey);
  } catch {
    return false;
  }
}

/** What a leaf certificate is for. */
export interface LeafRequest {
  commonName: string;
  dnsNames: string[];
  ipAddresses: string[];
  usage: "server" | "client";
}

export interface LeafPolicy {
  validityMs: number;
  /** Re-issue once the certificate is this old. */
  refreshAfterMs: number;
  /** What "now" is for renewal and the issued-at annotation (default {@link realClock}). */
  clock?: Clock;
}

/** Hash of a request and its issuer: a different hash means the certificate must be re-issued. */
export function leafRequestHash(request: LeafRequest, ca: SigningCa): string {
  return createHash("sha256")
    .update(
      JSON.stringify([
        request.commonName,
        [...request.dnsNames].sort(),
        [...request.ipAddresses].sort(),
        request.usage,
        ca.fingerprint,
      ]),
    )
    .digest("hex")
    .slice(0, 16);
}

/**
 * Why the certificate in `secret` must be re-issued for `request`, or undefined while it is good.
 * Also returns when it should next be looked at.
 */
export function leafRenewal(
  secret: SecretObject | undefined,
  request: LeafRequest,
  ca: SigningCa,
  policy: LeafPolicy,
): { reason?: string; recheckInMs: number; notAfter?: Date } {
  const now = (policy.clock ?? realClock).now();
  if (!secret) return { reason: "missing", recheckInMs: 0 };
  const certPem = unb64(secret.data?.["tls.crt"]);
  const keyPem = unb64(secret.data?.["tls.key"]);
  let x: X509Certificate;
  try {
    x = new X509Certificate(certPem);
  } catch {
    return { reason: "unreadable certificate", recheckInMs: 0 };
  }
  if (!keyMatches(certPem, keyPem)) return { reason: "key does not match", recheckInMs: 0 };
  if (secret.metadata.annotations?.[CERT_HASH_ANNOTATION] !== leafRequestHash(request, ca))
    return { reason: "names, usage or issuer changed", recheckInMs: 0 };
  if (!x.checkIssued(new X509Certificate(ca.cert.certPem)) || !x.verify(new X509Certificate(ca.cert.certPem).publicKey))
    return { reason: "not issued by the current CA", recheckInMs: 0 };
  const notAfter = Date.parse(x.validTo);
  const issuedAt = Date.parse(secret.metadata.annotations?.[ISSUED_AT_ANNOTATION] ?? x.validFrom);
  const refreshAt = Math.min(issuedAt + policy.refreshAfterMs, notAfter - (notAfter - issuedAt) * 0.2);
  if (now >= refreshAt) return { reason: "due for rotation", recheckInMs: 0, notAfter: new Date(notAfter) };
  return { recheckInMs: refreshAt - now, notAfter: new Date(notAfter) };
}

/** Issue a leaf for `request` and return the Secret data (tls.crt, tls.key) and its annotation. */
export async function issueLeaf(
  request: LeafRequest,
  ca: SigningCa,
  policy: LeafPolicy,
): Promise<{ data: Record<string, string>; annotations: Record<string, string>; notAfter: Date }> {
  const leaf = await issueCertificate(ca.cert, {
    commonName: request.commonName,
    dnsNames: request.dnsNames,
    ipAddresses: request.ipAddresses,
    usage: request.usage,
    validityDays: policy.validityMs / DAY_MS,
    organization: "open-cluster-management:cluster-proxy",
  });
  return {
    data: { "tls.crt": b64(leaf.certPem), "tls.key": b64(leaf.keyPem) },
    annotations: {
      [CERT_HASH_ANNOTATION]: leafRequestHash(request, ca),
      [ISSUED_AT_ANNOTATION]: new Date((policy.clock ?? realClock).now()).toISOString(),
    },
    notAfter: new Date(Date.parse(new X509Certificate(leaf.certPem).validTo)),
  };
}

export { b64 };
