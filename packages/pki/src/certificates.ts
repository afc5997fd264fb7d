/**
 * A certificate authority and the leaf certificates it issues, as PEM text.
 *
 * Keys are generated with node's WebCrypto and written as unencrypted PKCS#8 PEM
 * (`-----BEGIN PRIVATE KEY-----`), which node's `tls`, Go's `crypto/tls` and openssl all read.
 * ECDSA P-256 is the default key algorithm; RSA-2048 is available for peers that need it.
 * Leaves are signed with SHA-256 (ECDSA-with-SHA256 or sha256WithRSAEncryption, after the CA key).
 */
import { KeyObject, createPrivateKey, randomBytes, webcrypto } from "node:crypto";
import { isIP } from "node:net";
import { errorMessage, ClusterProxyError, ErrorCodes } from "@cluster-proxy/errors";
import { x509 } from "./x509-engine.js";

/** Key algorithms a CA or leaf can be created with. */
export type KeyAlgorithm = "ECDSA-P256" | "RSA-2048";

/** What a leaf certificate may be used for (its extended key usage). */
export type CertificateUsage = "server" | "client" | "both";

/** A certificate and its private key, both PEM. */
export interface CertificateAndKey {
  /** The certificate, `-----BEGIN CERTIFICATE-----`. */
  certPem: string;
  /** The private key, PKCS#8 `-----BEGIN PRIVATE KEY-----`. */
  keyPem: string;
}

/** Options of {@link createCertificateAuthority}. */
export interface CertificateAuthorityOptions {
  /** Subject common name of the CA. */
  commonName: string;
  /** Validity from now, in days (default 3650). */
  validityDays?: number;
  /** Key algorithm (default `ECDSA-P256`). */
  keyAlgorithm?: KeyAlgorithm;
  /** Subject organization. */
  organization?: string;
}

/** Options of {@link issueCertificate}. */
export interface LeafCertificateOptions {
  /** Subject common name. */
  commonName: string;
  /** DNS subject alternative names. */
  dnsNames?: readonly string[];
  /** IP subject alternative names (IPv4 or IPv6). */
  ipAddresses?: readonly string[];
  /** URI subject alternative names. */
  uris?: readonly string[];
  /** Extended key usage: TLS server, TLS client, or both. */
  usage: CertificateUsage;
  /** Validity from now, in days (default 365). */
  validityDays?: number;
  /** Subject organization. */
  organization?: string;
  /** Key algorithm of the new key (default `ECDSA-P256`). */
  keyAlgorithm?: KeyAlgorithm;
}

/** A certificate, key or option given to this module is unusable. */
export class CertificateError extends ClusterProxyError<typeof ErrorCodes.certificate> {
  constructor(message: string, options?: ErrorOptions) {
    super(ErrorCodes.certificate, message, options);
    this.name = "CertificateError";
  }
}

/** Certificates are valid from a little before "now" so peers with a slightly slow clock accept them. */
const CLOCK_SKEW_MS = 5 * 60_000;
const DAY_MS = 86_400_000;

type KeyParams = webcrypto.EcKeyImportParams | webcrypto.RsaHashedImportParams;

function keyGenParams(alg: KeyAlgorithm): webcrypto.EcKeyGenParams | webcrypto.RsaHashedKeyGenParams {
  switch (alg) {
    case "ECDSA-P256":
      return { name: "ECDSA", namedCurve: "P-256" };
    case "RSA-2048":
      return {
        name: "RSASSA-PKCS1-v1_5",
        modulusLength: 2048,
        publicExponent: new Uint8Array([1, 0, 1]),
        hash: "SHA-256",
      };
    default:
      throw new CertificateError(`unsupported key algorithm "${String(alg)}" (use ECDSA-P256 or RSA-2048)`);
  }
}

function signingAlgorithm(params: KeyParams): webcrypto.EcdsaParams | webcrypto.Algorithm {
  return params.name === "ECDSA" ? { name: "ECDSA", hash: "SHA-256" } : { name: "RSASSA-PKCS1-v1_5" };
}

async function generateKeyPair(alg: KeyAlgorithm): Promise<webcrypto.CryptoKeyPair> {
  return webcrypto.subtle.generateKey(keyGenParams(alg), true, ["sign", "verify"]);
}

function privateKeyPem(key: webcrypto.CryptoKey): string {
  return KeyObject.from(key).export({ type: "pkcs8", format: "pem" }) as string;
}

/** Import a PEM private key (PKCS#8, SEC1 or PKCS#1) as a WebCrypto signing key. */
async function importSigningKey(keyPem: string): Promise<{ key: webcrypto.CryptoKey; params: KeyParams }> {
  let keyObject: KeyObject;
  try {
    keyObject = createPrivateKey(keyPem);
  } catch (err) {
    throw new CertificateError(`CA key: not a readable PEM private key (${errorMessage(err)})`, { cause: err });
  }
  let params: KeyParams;
  if (keyObject.asymmetricKeyType === "ec") {
    const curve = keyObject.asymmetricKeyDetails?.namedCurve;
    const named = curve === "prime256v1" ? "P-256" : curve === "secp384r1" ? "P-384" : undefined;
    if (!named) throw new CertificateError(`CA key: unsupported EC curve ${curve ?? "(unknown)"}`);
    params = { name: "ECDSA", namedCurve: named };
  } else if (keyObject.asymmetricKeyType === "rsa") {
    params = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
  } else {
    throw new CertificateError(`CA key: unsupported key type ${keyObject.asymmetricKeyType ?? "(unknown)"}`);
  }
  const der = keyObject.export({ type: "pkcs8", format: "der" });
  const key = await webcrypto.subtle.importKey("pkcs8", der, params, false, ["sign"]);
  return { key, params };
}

/** A positive, non-zero 128-bit serial number in hex. */
function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return bytes.toString("hex");
}

function subjectName(commonName: string, organization?: string): x509.JsonName {
  if (commonName.trim() === "") throw new CertificateError("commonName must not be empty");
  const name: x509.JsonName = [];
  if (organization) name.push({ O: [organization] });
  name.push({ CN: [commonName] });
  return name;
}

function validity(days: number, field: string): { notBefore: Date; notAfter: Date } {
  if (!Number.isFinite(days) || days <= 0)
    throw new CertificateError(`${field}: ${days} is not a positive number of days`);
  const now = Date.now();
  return { notBefore: new Date(now - CLOCK_SKEW_MS), notAfter: new Date(now + days * DAY_MS) };
}

/**
 * Create a self-signed certificate authority (basicConstraints CA:TRUE, pathlen 0; key usage
 * keyCertSign + cRLSign + digitalSignature).
 */
export async function createCertificateAuthority(options: CertificateAuthorityOptions): Promise<CertificateAndKey> {
  const alg = options.keyAlgorithm ?? "ECDSA-P256";
  const keys = await generateKeyPair(alg);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name: subjectName(options.commonName, options.organization),
    keys,
    signingAlgorithm: signingAlgorithm(keyGenParams(alg)),
    ...validity(options.validityDays ?? 3650, "validityDays"),
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString("pem") + "\n", keyPem: privateKeyPem(keys.privateKey) };
}

function subjectAltNames(options: LeafCertificateOptions): x509.JsonGeneralName[] {
  const names: x509.JsonGeneralName[] = [];
  for (const dns of options.dnsNames ?? []) {
    if (dns === "" || isIP(dns) !== 0 || /[\s/,]/.test(dns))
      throw new CertificateError(`dnsNames: "${dns}" is not a DNS name`);
    names.push({ type: "dns", value: dns });
  }
  for (const ip of options.ipAddresses ?? []) {
    if (isIP(ip) === 0) throw new CertificateError(`ipAddresses: "${ip}" is not an IP address`);
    names.push({ type: "ip", value: ip });
  }
  for (const uri of options.uris ?? []) {
    if (!URL.canParse(uri)) throw new CertificateError(`uris: "${uri}" is not a URI`);
    names.push({ type: "url", value: uri });
  }
  return names;
}

function extendedKeyUsages(usage: CertificateUsage): string[] {
  switch (usage) {
    case "server":
      return [x509.ExtendedKeyUsage.serverAuth];
    case "client":
      return [x509.ExtendedKeyUsage.clientAuth];
    case "both":
      return [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth];
    default:
      throw new CertificateError(`usage: "${String(usage)}" is not one of server, client, both`);
  }
}

/**
 * The extensions of every leaf: basicConstraints CA:FALSE, key usage digitalSignature (plus
 * keyEncipherment for RSA keys), the extended key usage of `usage`, subject/authority key
 * identifiers, and the SANs when there are any.
 */
async function leafExtensions(
  rsa: boolean,
  usage: CertificateUsage,
  sans: x509.JsonGeneralName[],
  publicKey: x509.PublicKey | webcrypto.CryptoKey,
  caCert: x509.X509Certificate,
): Promise<x509.Extension[]> {
  const usages = rsa
    ? x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment
    : x509.KeyUsageFlags.digitalSignature;
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(usages, true),
    new x509.ExtendedKeyUsageExtension(extendedKeyUsages(usage), false),
    await x509.SubjectKeyIdentifierExtension.create(publicKey),
    await x509.AuthorityKeyIdentifierExtension.create(caCert),
  ];
  if (sans.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(sans, false));
  return extensions;
}

/**
 * Issue a leaf certificate signed by `ca`, with a fresh key. The certificate carries the given
 * SANs, basicConstraints CA:FALSE, key usage digitalSignature (plus keyEncipherment for RSA keys),
 * the extended key usage of `usage`, and subject/authority key identifiers.
 */
export async function issueCertificate(
  ca: CertificateAndKey,
  options: LeafCertificateOptions,
): Promise<CertificateAndKey> {
  let caCert: x509.X509Certificate;
  try {
    caCert = new x509.X509Certificate(ca.certPem);
  } catch (err) {
    throw new CertificateError(`CA certificate: not a readable PEM certificate (${errorMessage(err)})`, {
      cause: err,
    });
  }
  const signer = await importSigningKey(ca.keyPem);
  const alg = options.keyAlgorithm ?? "ECDSA-P256";
  const keys = await generateKeyPair(alg);
  const extensions = await leafExtensions(
    alg === "RSA-2048",
    options.usage,
    subjectAltNames(options),
    keys.publicKey,
    caCert,
  );
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: subjectName(options.commonName, options.organization),
    issuer: caCert.subjectName,
    publicKey: keys.publicKey,
    signingKey: signer.key,
    signingAlgorithm: signingAlgorithm(signer.params),
    ...validity(options.validityDays ?? 365, "validityDays"),
    extensions,
  });
  return { certPem: cert.toString("pem") + "\n", keyPem: privateKeyPem(keys.privateKey) };
}

/** The parts of a PKCS#10 certificate signing request that a signer decides on. */
export interface ParsedCertificateRequest {
  /** Subject common name (the first CN). */
  commonName: string;
  /** Subject organizations (O), in request order. */
  organizations: string[];
  /** Subject organizational units (OU), in request order. */
  organizationalUnits: string[];
  /** Key type of the requested public key: `ec` or `rsa` (others are refused when parsing). */
  keyType: "ec" | "rsa";
}

function parseRequestPem(csrPem: string): x509.Pkcs10CertificateRequest {
  const match = /-----BEGIN CERTIFICATE REQUEST-----([\s\S]*?)-----END CERTIFICATE REQUEST-----/.exec(csrPem);
  if (!match) throw new CertificateError("not a PEM certificate request (no BEGIN CERTIFICATE REQUEST block)");
  try {
    return new x509.Pkcs10CertificateRequest(Buffer.from(match[1]!.replace(/\s+/g, ""), "base64"));
  } catch (err) {
    throw new CertificateError(`not a readable certificate request (${errorMessage(err)})`, { cause: err });
  }
}

/**
 * Parse a PEM PKCS#10 request and check its self-signature (proof that the requester holds the
 * key). Throws {@link CertificateError} for unreadable, badly signed or non-EC/RSA requests.
 */
export async function parseCertificateRequest(csrPem: string): Promise<ParsedCertificateRequest> {
  const csr = parseRequestPem(csrPem);
  let valid: boolean;
  try {
    valid = await csr.verify();
  } catch (err) {
    throw new CertificateError(`certificate request: signature not verifiable (${errorMessage(err)})`, {
      cause: err,
    });
  }
  if (!valid) throw new CertificateError("certificate request: the signature does not match its public key");
  const algorithm: string = (csr.publicKey.algorithm as { name: string }).name;
  const keyType = algorithm === "ECDSA" ? "ec" : algorithm.startsWith("RSA") ? "rsa" : undefined;
  if (!keyType) throw new CertificateError(`certificate request: unsupported key algorithm ${algorithm}`);
  const name = csr.subjectName;
  return {
    commonName: name.getField("CN")[0] ?? "",
    organizations: name.getField("O"),
    organizationalUnits: name.getField("OU"),
    keyType,
  };
}

/** Options of {@link signCertificateRequest}. */
export interface SignRequestOptions {
  /** URI subject alternative names (the request's own SANs are never copied). */
  uris?: readonly string[];
  /** Extended key usage. */
  usage: CertificateUsage;
  /** Validity from now, in days; capped at the CA's own notAfter. */
  validityDays: number;
}

/**
 * Sign the public key of a PKCS#10 request with `ca`. The subject is copied verbatim (OCM's
 * registration agent compares it with what it asked for); the SANs are only `options.uris`,
 * whatever the request asked for. Returns the certificate PEM.
 */
export async function signCertificateRequest(
  ca: CertificateAndKey,
  csrPem: string,
  options: SignRequestOptions,
): Promise<string> {
  const parsed = await parseCertificateRequest(csrPem);
  const csr = parseRequestPem(csrPem);
  const caCert = new x509.X509Certificate(ca.certPem);
  const signer = await importSigningKey(ca.keyPem);
  const span = validity(options.validityDays, "validityDays");
  if (span.notAfter > caCert.notAfter) span.notAfter = caCert.notAfter;
  const sans = subjectAltNames({ commonName: "x", usage: options.usage, uris: options.uris ?? [] });
  const extensions = await leafExtensions(parsed.keyType === "rsa", options.usage, sans, csr.publicKey, caCert);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: csr.subjectName,
    issuer: caCert.subjectName,
    publicKey: csr.publicKey,
    signingKey: signer.key,
    signingAlgorithm: signingAlgorithm(signer.params),
    ...span,
    extensions,
  });
  return cert.toString("pem") + "\n";
}
