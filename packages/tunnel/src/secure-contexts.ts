/**
 * Client TLS contexts shared by the connections of one identity: without them node builds an
 * OpenSSL context (certificate, key, CA store) for every `tls.connect`, about as much client CPU
 * as a resumed handshake itself. Measured: docs/design/performance-notes.md, "The client's TLS context".
 */
import { createHash } from "node:crypto";
import * as tls from "node:tls";

/** Contexts kept at most (the least recently used is dropped for a new one). */
const MAX_CONTEXTS = 16;

/**
 * The options `tls.createSecureContext` reads. A connection whose options hold any of them in a
 * form other than a string, a buffer, a number, a boolean or a list of strings and buffers (a
 * pfx object list, an engine) gets a context of its own, as without the cache.
 */
const CONTEXT_OPTIONS = [
  "ca",
  "allowPartialTrustChain",
  "cert",
  "key",
  "passphrase",
  "pfx",
  "crl",
  "ciphers",
  "sigalgs",
  "ecdhCurve",
  "dhparam",
  "minVersion",
  "maxVersion",
  "secureOptions",
  "secureProtocol",
  "honorCipherOrder",
  "sessionIdContext",
  "ticketKeys",
  "sessionTimeout",
  "privateKeyEngine",
  "privateKeyIdentifier",
  "clientCertEngine",
] as const;

/** Context options node reads that its types do not declare (yet): read by name. */
const UNDECLARED_CONTEXT_OPTIONS = ["certificateCompression"] as const;

/** A digest of the context options of `options`; undefined when one cannot be digested. */
function contextKey(options: tls.ConnectionOptions): string | undefined {
  const h = createHash("sha256");
  const values: [string, unknown][] = [
    ...CONTEXT_OPTIONS.map((name): [string, unknown] => [name, options[name]]),
    ...UNDECLARED_CONTEXT_OPTIONS.map((name): [string, unknown] => [name, Reflect.get(options, name)]),
  ];
  for (const [name, value] of values) {
    if (value === undefined) continue;
    const parts: unknown[] = Array.isArray(value) ? value : [value];
    h.update(`${name}=${parts.length}[`);
    for (const part of parts) {
      if (typeof part === "string" || Buffer.isBuffer(part)) {
        const b = typeof part === "string" ? Buffer.from(part) : part;
        h.update(`${typeof part}${b.length}:`);
        h.update(b);
      } else if (!Array.isArray(value) && (typeof part === "number" || typeof part === "boolean")) {
        h.update(`${typeof part}:${String(part)}`);
      } else return undefined;
      h.update(";");
    }
    h.update("]");
  }
  return h.digest("base64url");
}

/** A bounded cache of client TLS contexts by their options' content. */
export class SecureContextCache {
  private readonly entries = new Map<string, tls.SecureContext>();

  constructor(private readonly maxContexts = MAX_CONTEXTS) {}

  /**
   * `options` with the shared context of its certificate, key, CA and other context options as
   * `secureContext` (made on first use; throws what `tls.createSecureContext` throws for bad
   * material). Options that already name a context, or that cannot be keyed, are returned as they are.
   */
  withContext(options: tls.ConnectionOptions): tls.ConnectionOptions {
    if (options.secureContext) return options;
    const key = contextKey(options);
    if (key === undefined) return options;
    let context = this.entries.get(key);
    if (context) this.entries.delete(key);
    else context = tls.createSecureContext(options);
    this.entries.set(key, context);
    while (this.entries.size > this.maxContexts) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
    return { ...options, secureContext: context };
  }

  get size(): number {
    return this.entries.size;
  }
}

/** The contexts of every connection to a proxy-server this process opens (SDK and agent). */
export const sharedSecureContexts = new SecureContextCache();
