/**
 * What one gateway endpoint request asks for (target, credential, forwarded headers), decided from the
 * end-to-end headers only. Pure functions; the agent is the last line of the impersonation checks.
 * Design: docs/design/gateway.md#the-gateway---agent-endpoint-contract-http2-over-the-mutual-tls-stream-upgrades-http11
 */
import { isIP } from "node:net";
import {
  CONTRACT_HEADER_PREFIX,
  FORWARDED_FOR_HEADER,
  FORWARDED_PROTO_HEADER,
  GATEWAY_TARGETS,
  IMPERSONATE_EXTRA_PREFIX,
  IMPERSONATE_GROUP_HEADER,
  IMPERSONATE_HEADER_PREFIX,
  IMPERSONATE_UID_HEADER,
  IMPERSONATE_USER_HEADER,
  PASSTHROUGH_HEADER,
  PASSTHROUGH_VALUE,
  SERVICE_HEADER,
  TARGET_HEADER,
  UNPREFIXED_GROUPS,
} from "@cluster-proxy/api";
import { HOP_BY_HOP_HEADERS, connectionOptions, isCallerClaimHeader } from "@cluster-proxy/kit";

/** Where a request goes and with which credential. */
export type GatewayTarget =
  /** The kube-apiserver, as the identity in the Impersonate-* headers (the agent's token). */
  | { kind: "kube"; credential: "impersonate" }
  /** The kube-apiserver with the caller's Authorization, no agent credential. */
  | { kind: "kube"; credential: "passthrough" }
  /** A Service in the cluster; `servername` is `<name>.<namespace>.svc`. */
  | { kind: "service"; url: URL; servername: string };

/** A request the endpoint refuses (answered 400 with `message`). */
export interface TargetRefusal {
  refused: string;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** The one value of a header, or undefined when absent; a repeated header is refused. */
function single(headers: RawHeaders, name: string): string | undefined | TargetRefusal {
  const values = headerValues(headers, name);
  if (values.length > 1) return { refused: `${name} given ${values.length} times` };
  return values[0];
}

/** Raw headers as Node gives them: `[name, value, name, value, ...]`. */
export type RawHeaders = readonly string[];

/** The `[name, value]` pairs of raw headers, in order. */
export function* headerPairs(headers: RawHeaders): Generator<[name: string, value: string]> {
  for (let i = 0; i + 1 < headers.length; i += 2) yield [headers[i] ?? "", headers[i + 1] ?? ""];
}

/** Every value of a header (case-insensitive name), in order. */
export function headerValues(headers: RawHeaders, name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2)
    if (headers[i]?.toLowerCase() === name) out.push(headers[i + 1] ?? "");
  return out;
}

/**
 * Check `Cluster-Proxy-Service`: `<http|https>://<name>.<namespace>.svc:<port>`, name and
 * namespace DNS-1123 labels, the port 1-65535, nothing else (no path, credentials or query).
 */
export function parseServiceTarget(value: string): GatewayTarget | TargetRefusal {
  const bad = (why: string): TargetRefusal => ({
    refused: `Cluster-Proxy-Service ${JSON.stringify(value)}: ${why}; expected <http|https>://<name>.<namespace>.svc:<port>`,
  });
  const m = /^(?<scheme>https?):\/\/(?<name>[^/:?#@]+)\.(?<namespace>[^/:?#@.]+)\.svc:(?<port>\d{1,5})\/?$/.exec(value);
  const { scheme, name, namespace, port: portText } = m?.groups ?? {};
  if (scheme === undefined || name === undefined || namespace === undefined || portText === undefined)
    return bad("not of the form");
  if (!DNS_LABEL.test(name)) return bad(`Service name ${JSON.stringify(name)} is not a DNS-1123 label`);
  if (!DNS_LABEL.test(namespace)) return bad(`namespace ${JSON.stringify(namespace)} is not a DNS-1123 label`);
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) return bad(`port ${portText} is not 1-65535`);
  const servername = `${name}.${namespace}.svc`;
  return { kind: "service", url: new URL(`${scheme}://${servername}:${port}`), servername };
}

/** The impersonation headers the kube-apiserver knows (`Impersonate-Extra-<key>` by prefix). */
const IMPERSONATE_FIXED = new Set([IMPERSONATE_USER_HEADER, IMPERSONATE_GROUP_HEADER, IMPERSONATE_UID_HEADER]);

/** Whether a header name (lowercase) is an impersonation header of any kind. */
function isImpersonation(lower: string): boolean {
  return lower.startsWith(IMPERSONATE_HEADER_PREFIX);
}

/** Whether `name` is `<prefix><something>`. */
function prefixed(name: string, prefix: string): boolean {
  return name.length > prefix.length && name.startsWith(prefix);
}

/**
 * Why the impersonation headers of a kube request are not the gateway's, or undefined when they
 * are: exactly one non-empty `Impersonate-User` with the prefix; every `Impersonate-Group` with
 * the prefix or one of {@link UNPREFIXED_GROUPS} (each comma-separated part too, so no later
 * joining or splitting of header values can yield an unprefixed group); at most one
 * `Impersonate-Uid`; `Impersonate-Extra-<key>` as given; no other `Impersonate-*` header.
 */
export function impersonationProblem(headers: RawHeaders, prefix: string): string | undefined {
  const users = headerValues(headers, IMPERSONATE_USER_HEADER);
  if (users.length === 0 || users.every((u) => u.trim() === ""))
    return "a kube request without Impersonate-User: refusing to send a request as the agent itself";
  if (users.length > 1) return `Impersonate-User given ${users.length} times`;
  const user = users[0] ?? "";
  if (!prefixed(user, prefix))
    return `Impersonate-User ${JSON.stringify(user)} lacks the gateway's impersonation prefix ${JSON.stringify(prefix)}`;
  for (const group of headerValues(headers, IMPERSONATE_GROUP_HEADER)) {
    const parts = [group, ...(group.includes(",") ? group.split(",").map((p) => p.trim()) : [])];
    const bad = parts.find((g) => !prefixed(g, prefix) && !UNPREFIXED_GROUPS.includes(g));
    if (bad !== undefined)
      return `Impersonate-Group ${JSON.stringify(bad)} lacks the gateway's impersonation prefix ${JSON.stringify(prefix)}`;
  }
  const uids = headerValues(headers, IMPERSONATE_UID_HEADER);
  if (uids.length > 1) return `Impersonate-Uid given ${uids.length} times`;
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i] ?? "";
    const lower = name.toLowerCase();
    if (isImpersonation(lower) && !IMPERSONATE_FIXED.has(lower) && !lower.startsWith(IMPERSONATE_EXTRA_PREFIX))
      return `unknown impersonation header ${JSON.stringify(name)}`;
  }
  return undefined;
}

/**
 * Where a request goes, from its headers, or why it is refused. Everything is read from the
 * end-to-end headers ({@link endToEndHeaders}): a header that a `Connection` header names never
 * reaches the upstream, so it cannot choose the credential either. A kube request is either
 * impersonated (the impersonation passes {@link impersonationProblem} with `prefix`, the
 * gateway's `--impersonation-prefix`) or pass-through (`Cluster-Proxy-Passthrough: true` and no
 * `Impersonate-*` header at all); a Service request carries neither impersonation nor pass-through.
 */
export function gatewayTarget(raw: RawHeaders, prefix: string): GatewayTarget | TargetRefusal {
  const headers = endToEndHeaders(raw, false);
  const target = single(headers, TARGET_HEADER);
  if (typeof target === "object") return target;
  if (target === undefined) return { refused: "missing Cluster-Proxy-Target header (kube or service)" };
  const passthroughValue = single(headers, PASSTHROUGH_HEADER);
  if (typeof passthroughValue === "object") return passthroughValue;
  const passthrough = passthroughValue?.trim().toLowerCase() === PASSTHROUGH_VALUE;
  let impersonating = false;
  for (let i = 0; i + 1 < headers.length && !impersonating; i += 2)
    impersonating = isImpersonation((headers[i] ?? "").toLowerCase());
  switch (target.trim().toLowerCase()) {
    case GATEWAY_TARGETS.kube: {
      if (passthrough) {
        return impersonating
          ? { refused: "Cluster-Proxy-Passthrough: true together with Impersonate-* headers: one credential only" }
          : { kind: "kube", credential: "passthrough" };
      }
      const problem = impersonationProblem(headers, prefix);
      return problem === undefined ? { kind: "kube", credential: "impersonate" } : { refused: problem };
    }
    case GATEWAY_TARGETS.service: {
      if (impersonating) return { refused: "Impersonate-* headers on a Cluster-Proxy-Target service request" };
      if (passthrough) return { refused: "Cluster-Proxy-Passthrough on a Cluster-Proxy-Target service request" };
      const service = single(headers, SERVICE_HEADER);
      if (typeof service === "object") return service;
      if (service === undefined)
        return { refused: "Cluster-Proxy-Target service without a Cluster-Proxy-Service header" };
      return parseServiceTarget(service.trim());
    }
    default:
      return { refused: `unknown Cluster-Proxy-Target ${JSON.stringify(target)} (kube or service)` };
  }
}

/** The names the `Connection` headers list (hop-by-hop too), lowercased. */
function connectionTokens(headers: RawHeaders): Set<string> {
  return connectionOptions(headerValues(headers, "connection"));
}

/** Whether a request asks for a protocol upgrade (`Connection: Upgrade` with an `Upgrade` header). */
export function isUpgradeRequest(headers: RawHeaders): boolean {
  return connectionTokens(headers).has("upgrade") && headerValues(headers, "upgrade").length > 0;
}

/**
 * Headers without the hop-by-hop ones (kit's `HOP_BY_HOP_HEADERS` and those `Connection` lists);
 * with `upgrade`, `Connection: Upgrade` and the `Upgrade` header(s) are kept. `Host` is not
 * dropped here ({@link forwardedHeaders} replaces it; an answer's is dropped where it is written).
 */
export function endToEndHeaders(headers: RawHeaders, upgrade: boolean): string[] {
  const listed = connectionTokens(headers);
  const out: string[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i] ?? "";
    const value = headers[i + 1] ?? "";
    const lower = name.toLowerCase();
    if (upgrade && lower === "upgrade") out.push(name, value);
    else if (!HOP_BY_HOP_HEADERS.has(lower) && !listed.has(lower)) out.push(name, value);
  }
  if (upgrade) out.push("Connection", "Upgrade");
  return out;
}

/** The one value of a contract header when it is given exactly once, else undefined. */
function contractValue(headers: RawHeaders, name: string): string | undefined {
  const values = headerValues(headers, name);
  return values.length === 1 ? values[0]?.trim() : undefined;
}

/**
 * `X-Forwarded-For` / `X-Forwarded-Proto` for a Service, from the gateway's
 * `Cluster-Proxy-Forwarded-For` (an IP literal) and `Cluster-Proxy-Forwarded-Proto` (`http` or
 * `https`), each only when present once and valid.
 */
function serviceForwarding(headers: RawHeaders): string[] {
  const out: string[] = [];
  const forwardedFor = contractValue(headers, FORWARDED_FOR_HEADER);
  if (forwardedFor !== undefined && isIP(forwardedFor) !== 0) out.push("X-Forwarded-For", forwardedFor);
  const proto = contractValue(headers, FORWARDED_PROTO_HEADER)?.toLowerCase();
  if (proto === "http" || proto === "https") out.push("X-Forwarded-Proto", proto);
  return out;
}

/**
 * The headers a request is forwarded with: end-to-end headers only, no HTTP/2 pseudo-header, no
 * `Cluster-Proxy-*`, no caller identity or forwarding header (kit's `isCallerClaimHeader`), `Host` set
 * to `host`, and the credential of the target:
 * - impersonate: the `Impersonate-*` headers as given (checked by {@link gatewayTarget}) and the
 *   agent's `Bearer <token>`, any Authorization dropped; without an `Impersonate-User` among the
 *   forwarded headers the token is not added (the agent never sends a request as itself);
 * - pass-through: the caller's Authorization, no `Impersonate-*`;
 * - Service: neither Authorization nor `Impersonate-*`; `X-Forwarded-For`/`-Proto` from the
 *   gateway's contract headers.
 */
export function forwardedHeaders(
  headers: RawHeaders,
  target: GatewayTarget,
  host: string,
  upgrade: boolean,
  agentToken: string | undefined,
): string[] {
  const impersonate = target.kind === "kube" && target.credential === "impersonate";
  const keepAuthorization = target.kind === "kube" && target.credential === "passthrough";
  const endToEnd = endToEndHeaders(headers, upgrade);
  const out: string[] = [];
  let user = false;
  for (let i = 0; i + 1 < endToEnd.length; i += 2) {
    const name = endToEnd[i] ?? "";
    const value = endToEnd[i + 1] ?? "";
    const lower = name.toLowerCase();
    // HTTP/2 pseudo-headers (`:path`, `:authority`) are the request line, not headers.
    if (
      lower.startsWith(":") ||
      lower.startsWith(CONTRACT_HEADER_PREFIX) ||
      lower === "host" ||
      isCallerClaimHeader(lower)
    )
      continue;
    if (lower === "authorization" && !keepAuthorization) continue;
    if (isImpersonation(lower)) {
      if (!impersonate) continue;
      if (lower === IMPERSONATE_USER_HEADER && value.trim() !== "") user = true;
    }
    out.push(name, value);
  }
  out.unshift("Host", host);
  if (target.kind === "service") out.push(...serviceForwarding(endToEnd));
  if (impersonate && user && agentToken !== undefined) out.push("Authorization", `Bearer ${agentToken}`);
  return out;
}
