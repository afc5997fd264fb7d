/**
 * Who the caller is, as only the gateway tells the cluster: every caller identity or forwarding header
 * removed before the tunnel, the contract's `Cluster-Proxy-Forwarded-For` / `-Proto` set.
 * Design: docs/design/gateway.md#browsers
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
