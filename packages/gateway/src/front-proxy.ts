/**
 * The hub apiserver as a front proxy (docs/design/gateway.md, "The aggregated path"): the hub
 * authenticates the user with whatever it knows (certificates, OIDC, exec plugins, webhooks) and
 * forwards the request with the identity in request headers (`X-Remote-User`, ...). The gateway
 * believes those headers only on a connection whose client certificate the hub's requestheader CA
 * signed, with a name the hub allows: both read from `kube-system/extension-apiserver-authentication`,
 * as every aggregated API server reads them, and reloaded when it changes.
 */
import { X509Certificate } from "node:crypto";
import type * as tls from "node:tls";
import type { UserInfo } from "./hub-api.js";
import { errorMessage } from "@cluster-proxy/errors";
import { realClock, type Clock } from "@cluster-proxy/kit";

/** Where the hub publishes its requestheader settings. */
export const EXTENSION_AUTH_CONFIGMAP = { namespace: "kube-system", name: "extension-apiserver-authentication" };

/** TLS client authentication (the front proxy's certificate must allow it when it names its usages). */
const CLIENT_AUTH_OID = "1.3.6.1.5.5.7.3.2";

/** The hub's requestheader settings, parsed. */
export interface RequestHeaderSettings {
  /** The CAs that sign the front proxy's client certificate. */
  cas: X509Certificate[];
  /** Common names the front proxy's certificate may have; empty: any the CAs signed. */
  allowedNames: string[];
  usernameHeaders: string[];
  uidHeaders: string[];
  groupHeaders: string[];
  extraHeaderPrefixes: string[];
}

/** The certificates of a PEM bundle. */
export function certificatesOf(pem: string): X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((b) => new X509Certificate(b));
}

function lowerList(data: Record<string, string>, key: string): string[] {
  const raw = data[key];
  if (raw === undefined || raw === "") return [];
  const parsed: unknown = JSON.parse(raw);
  if (!Array.isArray(parsed) || !parsed.every((v): v is string => typeof v === "string"))
    throw new Error(`${key} is not a JSON list of strings`);
  return parsed;
}

/**
 * The settings in the ConfigMap's `data`, or undefined when the hub has no front proxy
 * (`requestheader-client-ca-file` absent or empty). Throws naming the key that is malformed.
 */
export function parseRequestHeaderSettings(data: Record<string, string>): RequestHeaderSettings | undefined {
  const caPem = data["requestheader-client-ca-file"] ?? "";
  if (caPem.trim() === "") return undefined;
  const cas = certificatesOf(caPem);
  if (cas.length === 0) throw new Error("requestheader-client-ca-file holds no certificate");
  const lower = (key: string): string[] => lowerList(data, key).map((h) => h.toLowerCase());
  const settings: RequestHeaderSettings = {
    cas,
    allowedNames: lowerList(data, "requestheader-allowed-names"),
    usernameHeaders: lower("requestheader-username-headers"),
    uidHeaders: lower("requestheader-uid-headers"),
    groupHeaders: lower("requestheader-group-headers"),
    extraHeaderPrefixes: lower("requestheader-extra-headers-prefix"),
  };
  if (settings.usernameHeaders.length === 0)
    throw new Error("requestheader-username-headers is empty: the front proxy names no user header");
  return settings;
}

/** The common name of a certificate's subject. */
function commonName(cert: X509Certificate): string | undefined {
  return cert.subject
    .split("\n")
    .find((f) => f.startsWith("CN="))
    ?.slice(3);
}

/**
 * Whether `leaf` (the connection's client certificate) is signed directly by one of the settings'
 * CAs, is valid at `now` (and so is that CA), allows client authentication when it names its
 * usages, and has an allowed name. Signatures are checked here, not by the TLS handshake, so
 * that this trust stays apart from --client-ca-file's.
 */
export function isFrontProxy(settings: RequestHeaderSettings, leaf: X509Certificate, now: Date): boolean {
  const valid = (c: X509Certificate): boolean =>
    Date.parse(c.validFrom) <= now.getTime() && now.getTime() <= Date.parse(c.validTo);
  if (!valid(leaf)) return false;
  const usages = leaf.keyUsage;
  if (Array.isArray(usages) && usages.length > 0 && !usages.includes(CLIENT_AUTH_OID)) return false;
  if (settings.allowedNames.length > 0 && !settings.allowedNames.includes(commonName(leaf) ?? "")) return false;
  return settings.cas.some((ca) => ca.ca && valid(ca) && leaf.checkIssued(ca) && leaf.verify(ca.publicKey));
}

/**
 * The values of header `name` (lowercase) in `raw` (a request's `rawHeaders`: name, value, ...),
 * each field on its own: Node joins repeated fields with ", " in `headers`, and a group name may
 * itself hold a comma.
 */
function values(raw: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2)
    if (raw[i]!.toLowerCase() === name && raw[i + 1] !== "") out.push(raw[i + 1]!);
  return out;
}

/**
 * The identity the front proxy states in `raw` (the request's `rawHeaders`), or undefined when it
 * names no user. Groups come from every group header field (each field one group, as the hub
 * sends them); extra keys are the rest of a prefixed header's name, percent-decoded and
 * lowercased, as the kube-apiserver reads them, each field one value.
 */
export function frontProxyIdentity(settings: RequestHeaderSettings, raw: readonly string[]): UserInfo | undefined {
  const username = settings.usernameHeaders.map((h) => values(raw, h)[0]).find((u) => u !== undefined);
  if (username === undefined) return undefined;
  const uid = settings.uidHeaders.map((h) => values(raw, h)[0]).find((u) => u !== undefined);
  const groups = settings.groupHeaders.flatMap((h) => values(raw, h));
  // A Map, not an object literal: a key is whatever the hub's authenticator named (`constructor`,
  // `__proto__` and `toString` included), and an object would read those from its prototype.
  const extra = new Map<string, string[]>();
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    const prefix = settings.extraHeaderPrefixes.find((p) => name.startsWith(p));
    if (prefix === undefined) continue;
    let key: string;
    try {
      key = decodeURIComponent(name.slice(prefix.length)).toLowerCase();
    } catch {
      continue;
    }
    if (key === "") continue;
    const vals = extra.get(key) ?? [];
    vals.push(raw[i + 1]!);
    extra.set(key, vals);
  }
  // Object.fromEntries defines each key as an own property (`__proto__` too).
  return { username, groups, extra: Object.fromEntries(extra), ...(uid !== undefined ? { uid } : {}) };
}

/** Every header name the settings give meaning to: never forwarded, whoever sent them. */
export function frontProxyHeaderNames(settings: RequestHeaderSettings): (name: string) => boolean {
  const exact = new Set([...settings.usernameHeaders, ...settings.uidHeaders, ...settings.groupHeaders]);
  return (name) => exact.has(name) || settings.extraHeaderPrefixes.some((p) => name.startsWith(p));
}

/** The outcome of loading the hub's requestheader settings (logged by the gateway). */
export type FrontProxyUpdate =
  { kind: "loaded"; allowedNames: string[] } | { kind: "absent" } | { kind: "invalid"; problem: string };

/**
 * The current requestheader settings and which connections carry the front proxy's certificate
 * (decided once per connection and settings generation, and again once the certificate expired:
 * a connection outliving it is no longer the front proxy's).
 */
export class FrontProxyTrust {
  private settings: RequestHeaderSettings | undefined;
  private generation = 0;
  /** Per connection: the settings generation decided on, and until when it is the front proxy (-Infinity: not). */
  private readonly verdicts = new WeakMap<tls.TLSSocket, { generation: number; until: number }>();
  private dropped: (name: string) => boolean = () => false;

  /** `clock`: when connections are decided on and certificates checked, its `now()` read as Unix ms. */
  constructor(private readonly clock: Clock = realClock) {}

  /** Load the ConfigMap's data (undefined: deleted). A malformed update keeps the last good settings. */
  update(data: Record<string, string> | undefined): FrontProxyUpdate {
    let next: RequestHeaderSettings | undefined;
    try {
      next = data ? parseRequestHeaderSettings(data) : undefined;
    } catch (err) {
      return { kind: "invalid", problem: errorMessage(err) };
    }
    this.settings = next;
    this.generation++;
    this.dropped = next ? frontProxyHeaderNames(next) : () => false;
    return next ? { kind: "loaded", allowedNames: next.allowedNames } : { kind: "absent" };
  }

  /** Whether the front proxy's header names include `name` (lowercase): never forwarded. */
  isFrontProxyHeader(name: string): boolean {
    return this.dropped(name);
  }

  /**
   * The identity the front proxy states, when `socket` carries its certificate: a user, or
   * `"no-user"` when the headers name none; undefined for any other connection.
   */
  identify(socket: tls.TLSSocket | undefined, rawHeaders: readonly string[]): UserInfo | "no-user" | undefined {
    const settings = this.settings;
    if (!settings || !socket || !this.carries(socket)) return undefined;
    return frontProxyIdentity(settings, rawHeaders) ?? "no-user";
  }

  /** Whether `socket` carries the front proxy's certificate now (an allowed name of the requestheader CA, valid). */
  carries(socket: tls.TLSSocket): boolean {
    const settings = this.settings;
    if (!settings) return false;
    const now = this.clock.now();
    let verdict = this.verdicts.get(socket);
    if (verdict?.generation !== this.generation) {
      const leaf = socket.getPeerX509Certificate();
      const frontProxy = leaf !== undefined && isFrontProxy(settings, leaf, new Date(now));
      verdict = { generation: this.generation, until: frontProxy ? Date.parse(leaf.validTo) : -Infinity };
      this.verdicts.set(socket, verdict);
    }
    return now <= verdict.until;
  }
}
