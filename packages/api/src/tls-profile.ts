/**
 * `--cipher-suites` and `--tls-min-version` as the Go proxy-server reads them (Go's crypto/tls
 * names, as the OCM TLS profile writes them), mapped to node's TLS options. Unlike Go, which turns
 * an unknown name into cipher 0 without a word, an unknown or insecure name is a ConfigError
 * naming the flag and the value.
 */
import { ConfigError } from "./options.js";

/** Go `tls.CipherSuites()` names (TLS 1.0-1.2) -> OpenSSL names. */
const GO_TLS12_SUITES: Readonly<Record<string, string>> = {
  TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA: "ECDHE-ECDSA-AES128-SHA",
  TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA: "ECDHE-ECDSA-AES256-SHA",
  TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA: "ECDHE-RSA-AES128-SHA",
  TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA: "ECDHE-RSA-AES256-SHA",
  TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: "ECDHE-ECDSA-AES128-GCM-SHA256",
  TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384: "ECDHE-ECDSA-AES256-GCM-SHA384",
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: "ECDHE-RSA-AES128-GCM-SHA256",
  TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384: "ECDHE-RSA-AES256-GCM-SHA384",
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256: "ECDHE-RSA-CHACHA20-POLY1305",
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: "ECDHE-ECDSA-CHACHA20-POLY1305",
  // Go's older spellings of the two ChaCha20 suites
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305: "ECDHE-RSA-CHACHA20-POLY1305",
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305: "ECDHE-ECDSA-CHACHA20-POLY1305",
};

/** TLS 1.3 suites: accepted and ignored, as in Go ("has no effect on TLS 1.3"). */
export const TLS13_SUITES = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"];

/** Go `--tls-min-version` values -> node's. */
const TLS_VERSIONS: Readonly<Record<string, "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3">> = {
  VersionTLS10: "TLSv1",
  VersionTLS11: "TLSv1.1",
  VersionTLS12: "TLSv1.2",
  VersionTLS13: "TLSv1.3",
};

/** The node `tls` options of a TLS profile. */
export interface TlsProfileOptions {
  minVersion: "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3";
  /** OpenSSL cipher list (TLS 1.2 suites chosen, TLS 1.3 defaults kept); absent: node's default. */
  ciphers?: string;
}

/**
 * Map `--cipher-suites` (Go names) and `--tls-min-version` (`VersionTLS12`, ...; empty is TLS 1.2)
 * to node TLS options. Throws a {@link ConfigError} naming the flag for an unknown value.
 */
export function tlsProfileOptions(cipherSuites: readonly string[] = [], tlsMinVersion = ""): TlsProfileOptions {
  const minVersion = tlsMinVersion === "" ? "TLSv1.2" : TLS_VERSIONS[tlsMinVersion];
  if (minVersion === undefined) {
    throw new ConfigError(
      `--tls-min-version: "${tlsMinVersion}" is not one of ${Object.keys(TLS_VERSIONS).join(", ")} (empty: VersionTLS12)`,
    );
  }
  if (cipherSuites.length === 0) return { minVersion };
  const tls12: string[] = [];
  for (const name of cipherSuites) {
    if (TLS13_SUITES.includes(name)) continue;
    const openssl = GO_TLS12_SUITES[name];
    if (openssl === undefined) {
      throw new ConfigError(
        `--cipher-suites: "${name}" is not a supported cipher suite (Go crypto/tls names of secure suites, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; insecure suites such as TLS_RSA_* are refused)`,
      );
    }
    if (!tls12.includes(openssl)) tls12.push(openssl);
  }
  if (tls12.length === 0 && minVersion !== "TLSv1.3") {
    throw new ConfigError(
      "--cipher-suites: lists only TLS 1.3 suites, which leaves no cipher for TLS 1.2 (add TLS 1.2 suites or set --tls-min-version=VersionTLS13)",
    );
  }
  return { minVersion, ciphers: [...TLS13_SUITES, ...tls12].join(":") };
}

/**
 * The ALPN list the agent offers for `--alpn-proto`: the given protocols, then `h2` (gRPC needs
 * it; grpc-go appends it the same way).
 */
export function agentAlpnProtocols(alpnProto: readonly string[] = []): string[] {
  const out = alpnProto.filter((p) => p !== "");
  if (!out.includes("h2")) out.push("h2");
  return out;
}
