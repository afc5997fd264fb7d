/**
 * What one gateway endpoint request asks for (docs/design/gateway.md, the gateway -> agent
 * contract): where it goes (`Cluster-Proxy-Target`, `Cluster-Proxy-Service`), with which
 * credential (impersonation with the agent's token, or the caller's own in pass-through), and the
 * headers it is forwarded with. Pure functions over the request's raw headers.
 */

/** The header naming the target: `kube` or `service`. */
export const TARGET_HEADER = "cluster-proxy-target";
/** The Service URL of a `service` target: `<http|https>://<name>.<namespace>.svc:<port>`. */
export const SERVICE_HEADER = "cluster-proxy-service";
/** `true`: forward the caller's Authorization unchanged (no Impersonate-User). */
export const PASSTHROUGH_HEADER = "cluster-proxy-passthrough";

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
  for (const [n, v] of headerPairs(headers)) if (n.toLowerCase() === name) out.push(v);
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

/** Where a request goes, from its headers, or why it is refused. */
export function gatewayTarget(headers: RawHeaders): GatewayTarget | TargetRefusal {
  const target = single(headers, TARGET_HEADER);
  if (typeof target === "object") return target;
  if (target === undefined) return { refused: "missing Cluster-Proxy-Target header (kube or service)" };
  switch (target.trim().toLowerCase()) {
    case "kube": {
      const user = single(headers, "impersonate-user");
      if (typeof user === "object") return user;
      if (user !== undefined && user !== "") return { kind: "kube", credential: "impersonate" };
      const passthrough = single(headers, PASSTHROUGH_HEADER);
      if (typeof passthrough === "object") return passthrough;
      if (passthrough?.trim().toLowerCase() === "true") return { kind: "kube", credential: "passthrough" };
      return {
        refused:
          "Cluster-Proxy-Target kube without Impersonate-User or Cluster-Proxy-Passthrough: true: refusing to send a request as the agent itself",
      };
    }
    case "service": {
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

/** Hop-by-hop headers (RFC 9110 7.6.1), never forwarded (an upgrade re-adds its two). */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/** The names a `Connection` header lists (hop-by-hop too), lowercased. */
function connectionTokens(headers: RawHeaders): Set<string> {
  const names = new Set<string>();
  for (const v of headerValues(headers, "connection"))
    for (const token of v.split(",")) if (token.trim()) names.add(token.trim().toLowerCase());
  return names;
}

/** Whether a request asks for a protocol upgrade (`Connection: Upgrade` with an `Upgrade` header). */
export function isUpgradeRequest(headers: RawHeaders): boolean {
  return connectionTokens(headers).has("upgrade") && headerValues(headers, "upgrade").length > 0;
}

/**
 * Headers without the hop-by-hop ones (those of {@link HOP_BY_HOP} and those `Connection`
 * lists); with `upgrade`, `Connection: Upgrade` and the `Upgrade` header(s) are kept.
 */
export function endToEndHeaders(headers: RawHeaders, upgrade: boolean): string[] {
  const listed = connectionTokens(headers);
  const out: string[] = [];
  for (const [name, value] of headerPairs(headers)) {
    const lower = name.toLowerCase();
    if (upgrade && lower === "upgrade") out.push(name, value);
    else if (!HOP_BY_HOP.has(lower) && !listed.has(lower)) out.push(name, value);
  }
  if (upgrade) out.push("Connection", "Upgrade");
  return out;
}

/**
 * The headers a request is forwarded with: end-to-end headers only, no `Cluster-Proxy-*`, `Host`
 * set to `host`, and the credential of the target: the agent's `Bearer <token>` (any
 * Authorization dropped) to impersonate, the caller's Authorization in pass-through, none for a
 * Service. Impersonate-* headers pass as given.
 */
export function forwardedHeaders(
  headers: RawHeaders,
  target: GatewayTarget,
  host: string,
  upgrade: boolean,
  agentToken: string | undefined,
): string[] {
  const keepAuthorization = target.kind === "kube" && target.credential === "passthrough";
  const out: string[] = [];
  for (const [name, value] of headerPairs(endToEndHeaders(headers, upgrade))) {
    const lower = name.toLowerCase();
    if (lower.startsWith("cluster-proxy-") || lower === "host") continue;
    if (lower === "authorization" && !keepAuthorization) continue;
    out.push(name, value);
  }
  out.unshift("Host", host);
  if (target.kind === "kube" && target.credential === "impersonate" && agentToken !== undefined) {
    out.push("Authorization", `Bearer ${agentToken}`);
  }
  return out;
}
