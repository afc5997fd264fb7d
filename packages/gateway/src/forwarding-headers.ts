/**
 * Who the caller is, as the gateway (and only the gateway) tells the cluster: every identity or
 * forwarding header a caller set (`X-Remote-*`, `X-Forwarded-*`, `Forwarded`, `X-Real-Ip`,
 * `X-Auth-Request-*`, `X-Client-*`, `X-Original-*` and a few CDN spellings) is removed before the
 * tunnel, so no Service behind an auth proxy convention takes a caller's word for who it is, and
 * the contract headers `Cluster-Proxy-Forwarded-For` (the caller's address as the gateway's socket
 * saw it) and `Cluster-Proxy-Forwarded-Proto` are set. The agent removes the same headers again and
 * builds `X-Forwarded-For`/`-Proto` for a Service from the contract headers (docs/design/gateway.md).
 */
import { isIP } from "node:net";
import { FORWARDED_FOR_HEADER, FORWARDED_PROTO_HEADER } from "@cluster-proxy/api";
import { isCallerClaimHeader } from "@cluster-proxy/kit";

/** The caller's address as an IP literal (an IPv4-mapped IPv6 address as IPv4), or undefined. */
export function callerAddress(remoteAddress: string | undefined): string | undefined {
  if (!remoteAddress) return undefined;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(remoteAddress);
  const address = mapped ? mapped[1]! : remoteAddress;
  return isIP(address) ? address : undefined;
}

/**
 * `headers` (the ones admission forwards) without any caller-set forwarding header, with the
 * contract headers for a caller at `remoteAddress` over https.
 */
export function withForwarding(
  headers: Record<string, string | string[]>,
  remoteAddress: string | undefined,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) if (!isCallerClaimHeader(name)) out[name] = value;
  const address = callerAddress(remoteAddress);
  if (address) out[FORWARDED_FOR_HEADER] = address;
  out[FORWARDED_PROTO_HEADER] = "https";
  return out;
}
