/**
 * Checking PEM files before they are used (issue 18, point 4): a CA bundle that holds no
 * certificate, or a block that does not parse, is refused at start-up naming its flag, instead of
 * a server that starts and resets every client without a word.
 */
import { X509Certificate, createPrivateKey } from "node:crypto";
import { errorMessage } from "@cluster-proxy/errors";

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/**
 * What is wrong with `pem` as `kind` (one or more certificates; a private key), or undefined when
 * every certificate block parses / the key parses.
 */
export function pemProblem(pem: Buffer | string, kind: "certificate" | "key"): string | undefined {
  const text = typeof pem === "string" ? pem : pem.toString("latin1");
  if (kind === "key") {
    try {
      createPrivateKey(text);
      return undefined;
    } catch (err) {
      return `not a PEM private key (${errorMessage(err)})`;
    }
  }
  const blocks = text.match(CERT_BLOCK) ?? [];
  if (blocks.length === 0) return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)";
  for (const [i, block] of blocks.entries()) {
    try {
      new X509Certificate(block);
    } catch (err) {
      return `certificate ${i + 1} of ${blocks.length} does not parse (${errorMessage(err)})`;
    }
  }
  return undefined;
}
